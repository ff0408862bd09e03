import argparse

from megatron.core import parallel_state


def add_args(parser):
    parser.add_argument("--other", type=int, default=parallel_state.DEFAULT)
    return parser
