import os

import megatron.core.x


def f():
    return os, megatron
