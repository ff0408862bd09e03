import argparse


def add_args(parser: argparse.ArgumentParser):
    parser.add_argument("--verbose", action="store_true")
    return parser
