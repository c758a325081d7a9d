"""Tasks built on the library (e.g. the pendulum-cart swing-up and its training loop).

They are not loaded by ``import diffcam``; import them explicitly, e.g.
``from diffcam.tasks import swingup, training``.
"""
