"""keras-hub's API over the zoo: ``Backbone``, ``Task`` and preprocessor classes per family.

keras-hub's ``from_preset`` loads a preset that ``save_to_preset`` wrote, whichever
class wrote it, by the registered names in its ``config.json`` and ``task.json``: once
``keras_posenc``, Keras and keras-hub are imported, every class here is registered (see
keras_posenc/_registration.py), so ``keras_hub.models.Backbone.from_preset(folder)``
rebuilds ours. The zoo stays the short way in: ``zoo.create(name)`` builds the same
layers.

Examples:

    >>> import keras_hub
    >>> from keras_posenc import models
    >>> issubclass(models.ZooBackbone, keras_hub.models.Backbone)
    True
"""

from keras_posenc.models._backbone import ZooBackbone, copy_weights

# The generating text families: keras-hub Seq2SeqLM and CausalLM (models/seq2seq_lms.py,
# models/causal_lms.py).
from keras_posenc.models._generating_tasks import (
    TextBackbone,
    ZooCausalLM,
    ZooCausalLMPreprocessor,
    ZooSeq2SeqLM,
    ZooSeq2SeqLMPreprocessor,
)
from keras_posenc.models._text_tokenizers import ZooByteTokenizer, ZooWordTokenizer
from keras_posenc.models.causal_lms import (
    ConvS2SLanguageModelBackbone,
    ConvS2SLanguageModelCausalLM,
    ConvS2SLanguageModelCausalLMPreprocessor,
    ConvS2SLanguageModelTokenizer,
    DecoderLMBackbone,
    DecoderLMCausalLM,
    DecoderLMCausalLMPreprocessor,
    DecoderLMTokenizer,
    MusicTransformerBackbone,
    MusicTransformerCausalLM,
    MusicTransformerCausalLMPreprocessor,
    MusicTransformerTokenizer,
)

# Text encoders: DeBERTa v3, RoFormer v2 (keras_posenc/models/encoders.py, encoder_lms.py).
from keras_posenc.models.encoder_lms import (
    DebertaV3MaskedLM,
    DebertaV3MaskedLMPreprocessor,
    RoformerV2MaskedLM,
    RoformerV2MaskedLMPreprocessor,
)
from keras_posenc.models.encoders import (
    DebertaV3Backbone,
    DebertaV3TextClassifier,
    DebertaV3TextClassifierPreprocessor,
    DebertaV3Tokenizer,
    RoformerV2Backbone,
    RoformerV2TextClassifier,
    RoformerV2TextClassifierPreprocessor,
    RoformerV2Tokenizer,
)

# Images: CoAtNet, MaxViT, MaxxViT, Swin (backbones, classifiers, preprocessors, presets).
from keras_posenc.models.image import (
    CoAtNetBackbone,
    CoAtNetImageClassifier,
    CoAtNetImageClassifierPreprocessor,
    CoAtNetImageConverter,
    MaxViTBackbone,
    MaxViTImageClassifier,
    MaxViTImageClassifierPreprocessor,
    MaxViTImageConverter,
    MaxxViTBackbone,
    MaxxViTImageClassifier,
    MaxxViTImageClassifierPreprocessor,
    MaxxViTImageConverter,
    SwinBackbone,
    SwinImageClassifier,
    SwinImageClassifierPreprocessor,
    SwinImageConverter,
)
from keras_posenc.models.image_base import (
    ZooImageBackbone,
    ZooImageClassifier,
    ZooImageClassifierPreprocessor,
    ZooImageConverter,
)
from keras_posenc.models.image_presets import to_keras_hub_preset

# PosENet: keras-hub DepthEstimator (dense position maps; models/posenet.py).
from keras_posenc.models.posenet import (
    PosENetBackbone,
    PosENetDepthEstimator,
    PosENetDepthEstimatorPreprocessor,
    PosENetImageConverter,
    build_posenet_features,
)

# The encoder-decoders' Seq2SeqLMs (with the generating families above).
from keras_posenc.models.seq2seq_lms import (
    REVERSE_VOCABULARY,
    ConvS2SBackbone,
    ConvS2SSeq2SeqLM,
    ConvS2SSeq2SeqLMPreprocessor,
    ConvS2STokenizer,
    MUSEBackbone,
    MUSESeq2SeqLM,
    MUSESeq2SeqLMPreprocessor,
    MUSETokenizer,
    ShawTransformerBackbone,
    ShawTransformerSeq2SeqLM,
    ShawTransformerSeq2SeqLMPreprocessor,
    ShawTransformerTokenizer,
    ZooT5Backbone,
    ZooT5Seq2SeqLM,
    ZooT5Seq2SeqLMPreprocessor,
    ZooT5Tokenizer,
)

# Translation presets: fairseq's text pipeline as a keras-hub tokenizer (models/translation.py).
from keras_posenc.models.translation import (
    ConvS2STranslationTokenizer,
    MUSETranslationTokenizer,
    TranslationTokenizer,
    to_keras_hub_translation_preset,
)

__all__ = [
    "ZooBackbone",
    "copy_weights",
    # Images
    "CoAtNetBackbone",
    "CoAtNetImageClassifier",
    "CoAtNetImageClassifierPreprocessor",
    "CoAtNetImageConverter",
    "MaxViTBackbone",
    "MaxViTImageClassifier",
    "MaxViTImageClassifierPreprocessor",
    "MaxViTImageConverter",
    "MaxxViTBackbone",
    "MaxxViTImageClassifier",
    "MaxxViTImageClassifierPreprocessor",
    "MaxxViTImageConverter",
    "SwinBackbone",
    "SwinImageClassifier",
    "SwinImageClassifierPreprocessor",
    "SwinImageConverter",
    "ZooImageBackbone",
    "ZooImageClassifier",
    "ZooImageClassifierPreprocessor",
    "ZooImageConverter",
    "to_keras_hub_preset",
    # Text encoders: DeBERTa v3, RoFormer v2.
    "DebertaV3Backbone",
    "DebertaV3MaskedLM",
    "DebertaV3MaskedLMPreprocessor",
    "DebertaV3TextClassifier",
    "DebertaV3TextClassifierPreprocessor",
    "DebertaV3Tokenizer",
    "RoformerV2Backbone",
    "RoformerV2MaskedLM",
    "RoformerV2MaskedLMPreprocessor",
    "RoformerV2TextClassifier",
    "RoformerV2TextClassifierPreprocessor",
    "RoformerV2Tokenizer",
    # The generating text families.
    "TextBackbone",
    "ZooSeq2SeqLM",
    "ZooSeq2SeqLMPreprocessor",
    "ZooCausalLM",
    "ZooCausalLMPreprocessor",
    "ZooByteTokenizer",
    "ZooWordTokenizer",
    "REVERSE_VOCABULARY",
    "ConvS2SBackbone",
    "ConvS2SSeq2SeqLM",
    "ConvS2SSeq2SeqLMPreprocessor",
    "ConvS2STokenizer",
    "MUSEBackbone",
    "MUSESeq2SeqLM",
    "MUSESeq2SeqLMPreprocessor",
    "MUSETokenizer",
    "ShawTransformerBackbone",
    "ShawTransformerSeq2SeqLM",
    "ShawTransformerSeq2SeqLMPreprocessor",
    "ShawTransformerTokenizer",
    "ZooT5Backbone",
    "ZooT5Seq2SeqLM",
    "ZooT5Seq2SeqLMPreprocessor",
    "ZooT5Tokenizer",
    "ConvS2SLanguageModelBackbone",
    "ConvS2SLanguageModelCausalLM",
    "ConvS2SLanguageModelCausalLMPreprocessor",
    "ConvS2SLanguageModelTokenizer",
    "DecoderLMBackbone",
    "DecoderLMCausalLM",
    "DecoderLMCausalLMPreprocessor",
    "DecoderLMTokenizer",
    "MusicTransformerBackbone",
    "MusicTransformerCausalLM",
    "MusicTransformerCausalLMPreprocessor",
    "MusicTransformerTokenizer",
    # PosENet: keras-hub DepthEstimator.
    "PosENetBackbone",
    "PosENetDepthEstimator",
    "PosENetDepthEstimatorPreprocessor",
    "PosENetImageConverter",
    "build_posenet_features",
    # Translation presets.
    "ConvS2STranslationTokenizer",
    "MUSETranslationTokenizer",
    "TranslationTokenizer",
    "to_keras_hub_translation_preset",
]
