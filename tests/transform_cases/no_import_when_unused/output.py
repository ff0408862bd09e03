import argparse


def add_args(parser: argparse.ArgumentParser):
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--otel-enabled", action="store_true")
    return parser
