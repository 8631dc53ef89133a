import argparse

def register(sub: argparse._SubParsersAction) -> None:
    pass
