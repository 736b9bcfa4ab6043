"""keras-hub's API over the zoo: ``Backbone``, ``Task`` and preprocessor classes per family.

keras-hub's ``from_preset`` loads a preset that ``save_to_preset`` wrote, whichever
class wrote it, by the registered names in its ``config.json`` and ``task.json``: once
``keras_posenc`` and Keras are imported, every class here is registered (see
keras_posenc/_registration.py), so ``keras_hub.models.Backbone.from_preset(folder)``
rebuilds ours. The zoo stays the short way in: ``zoo.create(name)`` builds the same
layers.

Examples:

    >>> import keras_hub
    >>> from keras_posenc import models
    >>> issubclass(models.ZooBackbone, keras_hub.models.Backbone)
    True
"""

from keras_posenc.models._backbone import ZooBackbone

__all__ = ["ZooBackbone"]

# The generating text families: keras-hub Seq2SeqLM and CausalLM (models/generating.py).
from keras_posenc.models._generating_tasks import (  # noqa: E402
    ZooCausalLM,
    ZooCausalLMPreprocessor,
    ZooSeq2SeqLM,
    ZooSeq2SeqLMPreprocessor,
)
from keras_posenc.models._text_tokenizers import ZooByteTokenizer, ZooWordTokenizer  # noqa: E402
from keras_posenc.models.generating import (  # noqa: E402
    REVERSE_VOCABULARY,
    DecoderLMBackbone,
    DecoderLMCausalLM,
    DecoderLMCausalLMPreprocessor,
    DecoderLMTokenizer,
    ShawTransformerBackbone,
    ShawTransformerSeq2SeqLM,
    ShawTransformerSeq2SeqLMPreprocessor,
    ShawTransformerTokenizer,
)

__all__ += [
    "ZooSeq2SeqLM",
    "ZooSeq2SeqLMPreprocessor",
    "ZooCausalLM",
    "ZooCausalLMPreprocessor",
    "ZooByteTokenizer",
    "ZooWordTokenizer",
    "REVERSE_VOCABULARY",
    "ShawTransformerBackbone",
    "ShawTransformerTokenizer",
    "ShawTransformerSeq2SeqLMPreprocessor",
    "ShawTransformerSeq2SeqLM",
    "DecoderLMBackbone",
    "DecoderLMTokenizer",
    "DecoderLMCausalLMPreprocessor",
    "DecoderLMCausalLM",
]
