"""PosENet: measure how much absolute position a network's features encode.

Reference: Islam, Jia and Bruce, "How Much Position Information Do
Convolutional Neural Networks Encode?", ICLR 2020.
"""

from keras_posenc.probe.patterns import PATTERN_NAMES, position_patterns

__all__ = ["PATTERN_NAMES", "position_patterns"]
