"""The data collect, policy and enforce share: plain dataclasses and pure parsing, no I/O."""
