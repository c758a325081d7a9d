"""Tasks built on the library: the pendulum-cart swing-up (`tasks.swingup`) and its training
loop (`tasks.training`).

Not part of the ``diffcam`` distribution: they live beside the packages in a clone of the
repository (``from tasks import swingup, training`` with the clone's root on ``sys.path``, as
the examples, benchmarks and tests put it). The problem the swing-up solves is the library's
`diffcam.cartpole`, which the Gymnasium env ``diffcam/PendulumCartSwingUp-v0`` poses too.
"""
