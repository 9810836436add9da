"""A hook of ``mkdocs build``: jieba's start-up chatter left out of the build's output.

Material's search plugin segments the docs' Chinese examples with jieba's
global tokenizer, which logs "Building prefix dict ..." and "Loading model
cost ..." at DEBUG on its own stderr handler. Its warnings and errors still
show.
"""

from __future__ import annotations

import logging
from typing import Any


def on_startup(**_: Any) -> None:
    logger = logging.getLogger("jieba")
    if logger.level < logging.WARNING:
        logger.setLevel(logging.WARNING)
