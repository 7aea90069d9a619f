"""Real models: `transformers` architectures built from small configs, random weights.

Nothing is downloaded: each model is built from a config object (sizes below) with
random weights from a seeded generator, with its default attention implementation
(scaled_dot_product_attention where the model has it), dropout 0 (and every other
training-time randomness off: layer drop, SpecAugment masking), so both modes are
deterministic. Each architecture is two workloads of the zoo's kind
(:class:`bench.workloads.Workload`), run by the same ``make`` / ``step``:

* ``<model>_infer``: eval mode, ``torch.no_grad()``; the outputs (logits) are compared;
* ``<model>_train``: train mode, the model's own loss on random labels, backward; the
  loss, the logits and the gradient of every parameter are compared, and every floating
  buffer (batch-norm running statistics) after the step.

    inst = make("llama_train", size="small")
    tensors = step(inst, torch.compile(inst.fn, backend="fusionstitch"))

``small`` is what CI runs (tests/models/test_models_*.py); ``full`` is a few times larger
(the bench's default, and FUSIONSTITCH_MODELS=full in the tests).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from bench.workloads import Instance, Workload, step  # noqa: F401  (step: re-exported)

__all__ = ["MODELS", "WORKLOADS", "names", "make", "step", "build"]

# Weights drawn with a larger spread than Hugging Face's 0.02, so attention is far from
# uniform and gradients are not all tiny.
INIT_RANGE = 0.1
VOCAB = 96


def _lm_inputs(g, p, pad=None):
    """Token ids (batch, seq), an attention mask with the second sequence padded, and LM
    labels (-100 on the padding: ignored by the loss)."""
    b, s = p["batch"], p["seq"]
    ids = torch.randint(3, VOCAB, (b, s), generator=g)
    mask = torch.ones(b, s, dtype=torch.long)
    if b > 1:
        mask[1, s - s // 4:] = 0
        if pad is not None:
            ids[1, s - s // 4:] = pad
    labels = torch.where(mask.bool(), ids, torch.full_like(ids, -100))
    return ids, mask, labels


def _hidden(p):
    """Common transformer sizes: width, heads, layers, feed-forward width."""
    return dict(h=p["hidden"], heads=p["heads"], layers=p["layers"], ffn=2 * p["hidden"])


# --------------------------------------------------------------------------- builders
# Each returns (model, inputs: dict of tensors, labels: tensor | None, output key).

def _causal_lm(cls_name, cfg_name, **extra):
    def build(T, p, g):
        d = _hidden(p)
        cfg = getattr(T, cfg_name)(
            vocab_size=VOCAB, hidden_size=d["h"], intermediate_size=d["ffn"],
            num_hidden_layers=d["layers"], num_attention_heads=d["heads"],
            max_position_embeddings=2 * p["seq"], initializer_range=INIT_RANGE,
            attention_dropout=0.0, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            tie_word_embeddings=False, **{k: v(d) if callable(v) else v for k, v in extra.items()})
        model = getattr(T, cls_name)(cfg)
        ids, mask, labels = _lm_inputs(g, p)
        return model, {"input_ids": ids, "attention_mask": mask}, labels
    return build


def _gpt2(T, p, g):
    d = _hidden(p)
    cfg = T.GPT2Config(vocab_size=VOCAB, n_embd=d["h"], n_head=d["heads"], n_layer=d["layers"],
                       n_positions=2 * p["seq"], resid_pdrop=0.0, embd_pdrop=0.0,
                       attn_pdrop=0.0, summary_first_dropout=0.0,
                       initializer_range=INIT_RANGE, bos_token_id=1, eos_token_id=2)
    ids, mask, labels = _lm_inputs(g, p)
    return T.GPT2LMHeadModel(cfg), {"input_ids": ids, "attention_mask": mask}, labels


def _opt(T, p, g):
    d = _hidden(p)
    cfg = T.OPTConfig(vocab_size=VOCAB, hidden_size=d["h"], ffn_dim=d["ffn"],
                      num_hidden_layers=d["layers"], num_attention_heads=d["heads"],
                      max_position_embeddings=2 * p["seq"], word_embed_proj_dim=d["h"],
                      dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                      layerdrop=0.0, init_std=INIT_RANGE, pad_token_id=0,
                      bos_token_id=1, eos_token_id=2)
    ids, mask, labels = _lm_inputs(g, p)
    return T.OPTForCausalLM(cfg), {"input_ids": ids, "attention_mask": mask}, labels


def _masked_lm(cls_name, cfg_name, pad=0, position_offset=0, **extra):
    def build(T, p, g):
        d = _hidden(p)
        cfg = getattr(T, cfg_name)(
            vocab_size=VOCAB, hidden_size=d["h"], intermediate_size=d["ffn"],
            num_hidden_layers=d["layers"], num_attention_heads=d["heads"],
            max_position_embeddings=2 * p["seq"] + position_offset,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            initializer_range=INIT_RANGE, pad_token_id=pad, **extra)
        ids, mask, labels = _lm_inputs(g, p, pad=pad)
        return getattr(T, cls_name)(cfg), {"input_ids": ids, "attention_mask": mask}, labels
    return build


def _distilbert(T, p, g):
    d = _hidden(p)
    cfg = T.DistilBertConfig(vocab_size=VOCAB, dim=d["h"], hidden_dim=d["ffn"],
                             n_layers=d["layers"], n_heads=d["heads"],
                             max_position_embeddings=2 * p["seq"], dropout=0.0,
                             attention_dropout=0.0, qa_dropout=0.0, seq_classif_dropout=0.0,
                             initializer_range=INIT_RANGE, pad_token_id=0)
    ids, mask, labels = _lm_inputs(g, p, pad=0)
    return T.DistilBertForMaskedLM(cfg), {"input_ids": ids, "attention_mask": mask}, labels


def _seq2seq_inputs(g, p):
    ids, mask, _ = _lm_inputs(g, p, pad=0)
    labels = torch.randint(3, VOCAB, (p["batch"], max(2, p["seq"] // 2)), generator=g)
    return {"input_ids": ids, "attention_mask": mask}, labels


def _t5(T, p, g):
    d = _hidden(p)
    cfg = T.T5Config(vocab_size=VOCAB, d_model=d["h"], d_ff=d["ffn"],
                     d_kv=d["h"] // d["heads"], num_layers=d["layers"],
                     num_decoder_layers=d["layers"], num_heads=d["heads"],
                     relative_attention_num_buckets=8, dropout_rate=0.0,
                     initializer_factor=1.0, pad_token_id=0, eos_token_id=2,
                     decoder_start_token_id=0)
    inputs, labels = _seq2seq_inputs(g, p)
    return T.T5ForConditionalGeneration(cfg), inputs, labels


def _bart(T, p, g):
    d = _hidden(p)
    cfg = T.BartConfig(vocab_size=VOCAB, d_model=d["h"], encoder_layers=d["layers"],
                       decoder_layers=d["layers"], encoder_attention_heads=d["heads"],
                       decoder_attention_heads=d["heads"], encoder_ffn_dim=d["ffn"],
                       decoder_ffn_dim=d["ffn"], max_position_embeddings=2 * p["seq"],
                       dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                       encoder_layerdrop=0.0, decoder_layerdrop=0.0, init_std=INIT_RANGE,
                       pad_token_id=0, bos_token_id=1, eos_token_id=2,
                       decoder_start_token_id=2, forced_eos_token_id=None)
    inputs, labels = _seq2seq_inputs(g, p)
    return T.BartForConditionalGeneration(cfg), inputs, labels


def _whisper(T, p, g):
    d = _hidden(p)
    frames = 2 * p["seq"]   # two conv strides halve the frames: seq encoder positions
    cfg = T.WhisperConfig(vocab_size=VOCAB, num_mel_bins=8, d_model=d["h"],
                          encoder_layers=d["layers"], decoder_layers=d["layers"],
                          encoder_attention_heads=d["heads"], decoder_attention_heads=d["heads"],
                          encoder_ffn_dim=d["ffn"], decoder_ffn_dim=d["ffn"],
                          max_source_positions=p["seq"], max_target_positions=2 * p["seq"],
                          dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                          encoder_layerdrop=0.0, decoder_layerdrop=0.0, init_std=INIT_RANGE,
                          pad_token_id=0, bos_token_id=1, eos_token_id=2,
                          decoder_start_token_id=1, apply_spec_augment=False,
                          mask_time_prob=0.0, mask_feature_prob=0.0,
                          suppress_tokens=None, begin_suppress_tokens=None)
    feats = torch.randn(p["batch"], 8, frames, generator=g)
    labels = torch.randint(3, VOCAB, (p["batch"], max(2, p["seq"] // 2)), generator=g)
    return T.WhisperForConditionalGeneration(cfg), {"input_features": feats}, labels


def _images(g, p, channels=3):
    pixels = torch.randn(p["batch"], channels, p["image"], p["image"], generator=g)
    labels = torch.randint(0, 5, (p["batch"],), generator=g)
    return {"pixel_values": pixels}, labels


def _vit(T, p, g):
    d = _hidden(p)
    cfg = T.ViTConfig(image_size=p["image"], patch_size=p["image"] // 4, num_channels=3,
                      hidden_size=d["h"], num_hidden_layers=d["layers"],
                      num_attention_heads=d["heads"], intermediate_size=d["ffn"],
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                      initializer_range=INIT_RANGE, num_labels=5)
    inputs, labels = _images(g, p)
    return T.ViTForImageClassification(cfg), inputs, labels


def _convnext(T, p, g):
    w = p["hidden"] // 4
    cfg = T.ConvNextConfig(num_channels=3, num_stages=2, hidden_sizes=[w, 2 * w],
                           depths=[1, 1], patch_size=2, drop_path_rate=0.0,
                           initializer_range=INIT_RANGE, num_labels=5)
    inputs, labels = _images(g, p)
    return T.ConvNextForImageClassification(cfg), inputs, labels


def _resnet(T, p, g):
    w = p["hidden"] // 4
    cfg = T.ResNetConfig(num_channels=3, embedding_size=w, hidden_sizes=[w, 2 * w],
                         depths=[1, 1], layer_type="basic", num_labels=5)
    inputs, labels = _images(g, p)
    return T.ResNetForImageClassification(cfg), inputs, labels


def _mobilenet_v2(T, p, g):
    cfg = T.MobileNetV2Config(num_channels=3, image_size=p["image"], depth_multiplier=0.25,
                              min_depth=4, classifier_dropout_prob=0.0,
                              initializer_range=INIT_RANGE, num_labels=5)
    inputs, labels = _images(g, p)
    return T.MobileNetV2ForImageClassification(cfg), inputs, labels


def _mobilevit(T, p, g):
    # convolutions, then attention over unfolded patches, folded back (at 32 pixels its
    # last stage upsamples a 1x1 map, whose indices along dims of size 1 a kernel once
    # failed to compile: tests/frontend/test_index_bounds.py)
    cfg = T.MobileViTConfig(num_channels=3, image_size=p["image"], patch_size=2,
                            hidden_sizes=[16, 24, 32],
                            neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32],
                            num_attention_heads=2, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0,
                            aspp_dropout_prob=0.0, initializer_range=INIT_RANGE, num_labels=5)
    inputs, labels = _images(g, p)
    return T.MobileViTForImageClassification(cfg), inputs, labels


def _wav2vec2(T, p, g):
    d = _hidden(p)
    # feat_extract_norm="group": the first feature convolution is followed by a GroupNorm
    cfg = T.Wav2Vec2Config(vocab_size=VOCAB, hidden_size=d["h"], num_hidden_layers=d["layers"],
                           num_attention_heads=d["heads"], intermediate_size=d["ffn"],
                           conv_dim=(d["h"] // 2, d["h"] // 2), conv_stride=(4, 2),
                           conv_kernel=(8, 3), feat_extract_norm="group",
                           num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
                           hidden_dropout=0.0, activation_dropout=0.0, attention_dropout=0.0,
                           feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0,
                           mask_time_prob=0.0, mask_feature_prob=0.0, apply_spec_augment=False,
                           initializer_range=INIT_RANGE, num_labels=5,
                           classifier_proj_size=d["h"])
    wave = torch.randn(p["batch"], 8 * p["seq"] + 8, generator=g)
    labels = torch.randint(0, 5, (p["batch"],), generator=g)
    return T.Wav2Vec2ForSequenceClassification(cfg), {"input_values": wave}, labels


_ARCHS: dict[str, Callable] = {
    "gpt2": _gpt2,
    "llama": _causal_lm("LlamaForCausalLM", "LlamaConfig",
                        num_key_value_heads=lambda d: d["heads"] // 2),
    "mistral": _causal_lm("MistralForCausalLM", "MistralConfig",
                          num_key_value_heads=lambda d: d["heads"] // 2),
    "qwen2": _causal_lm("Qwen2ForCausalLM", "Qwen2Config",
                        num_key_value_heads=lambda d: d["heads"] // 2),
    "gemma": _causal_lm("GemmaForCausalLM", "GemmaConfig",
                        num_key_value_heads=lambda d: d["heads"] // 2,
                        head_dim=lambda d: d["h"] // d["heads"]),
    # a mixture of experts: a router's top-k, torch._assert_async, index_add and scatter
    # (the experts run as Hugging Face's loop over experts: the float64 reference has no
    # grouped GEMM)
    "mixtral": _causal_lm("MixtralForCausalLM", "MixtralConfig",
                          num_key_value_heads=lambda d: d["heads"] // 2,
                          head_dim=lambda d: d["h"] // d["heads"], num_local_experts=4,
                          num_experts_per_tok=2, experts_implementation="eager"),
    "opt": _opt,
    "bert": _masked_lm("BertForMaskedLM", "BertConfig"),
    "roberta": _masked_lm("RobertaForMaskedLM", "RobertaConfig", pad=1, position_offset=2),
    "distilbert": _distilbert,
    "albert": _masked_lm("AlbertForMaskedLM", "AlbertConfig",
                         embedding_size=16, classifier_dropout_prob=0.0),
    "electra": _masked_lm("ElectraForMaskedLM", "ElectraConfig", embedding_size=16,
                          summary_last_dropout=0.0),
    "t5": _t5,
    "bart": _bart,
    "whisper": _whisper,
    "vit": _vit,
    "convnext": _convnext,
    "resnet": _resnet,
    "mobilenet_v2": _mobilenet_v2,
    "mobilevit": _mobilevit,
    "wav2vec2": _wav2vec2,
}
MODELS = tuple(_ARCHS)
SEQ2SEQ = frozenset({"t5", "bart", "whisper"})

SIZES = {
    "small": dict(batch=2, seq=8, hidden=32, heads=4, layers=1, image=32),
    "full": dict(batch=4, seq=64, hidden=128, heads=4, layers=2, image=64),
}
# MobileNetV2 divides the image by 32: at 32 pixels its last batch norms, in training,
# normalise 2 values each (batch 2, 1x1), so eager fp32 itself is 18% off float64
# (MobileViT too: at 32 pixels, batch 2, eager fp32's gradients are rounding noise)
ARCH_SIZES = {"mobilenet_v2": {"small": dict(batch=4, image=64), "full": dict(image=128)},
              "mobilevit": {"small": dict(batch=4, image=64), "full": dict(image=128)}}


def _sizes(arch: str) -> dict:
    return {k: {**v, **ARCH_SIZES.get(arch, {}).get(k, {})} for k, v in SIZES.items()}


def random_config_fields(cfg: dict, prefix: str = "") -> list[str]:
    """Config fields that may draw random numbers in train mode and are not 0: every
    dropout-like field (`*drop*`: dropout, layerdrop, drop_path_rate) and every
    probability (`*_prob`: SpecAugment's mask_time_prob), also the ones the built head
    does not use (a model of another head built from the same config would)."""
    out = []
    for k, v in cfg.items():
        if isinstance(v, dict):
            out += random_config_fields(v, f"{prefix}{k}.")
        elif ("drop" in str(k).lower() or str(k).endswith("_prob")) and isinstance(v, (int, float)) \
                and not isinstance(v, bool) and v != 0:
            out.append(f"config.{prefix}{k}={v}")
    return out


@torch.no_grad()
def _randomise_norms(model: nn.Module, g: torch.Generator) -> None:
    """Random affine parameters of the normalisation layers (Hugging Face starts them at
    weight 1, bias 0), so that a norm's gradient paths are exercised in full."""
    for m in model.modules():
        name = type(m).__name__
        if "Norm" not in name:
            continue
        for pname, prm in m.named_parameters(recurse=False):
            if pname == "weight":
                prm.copy_(1.0 + 0.3 * torch.randn(prm.shape, generator=g))
            elif pname == "bias":
                prm.copy_(0.3 * torch.randn(prm.shape, generator=g))


class _Step(nn.Module):
    """The model called with keyword inputs; `forward(*tensors)` returns the outputs to
    compare: (logits,) in inference, (loss, logits) in training (the loss first: the
    step backpropagates it alone)."""

    def __init__(self, model: nn.Module, keys: tuple[str, ...], labels: bool):
        super().__init__()
        self.model, self.keys, self.labels = model, keys, labels

    def forward(self, *tensors):
        kwargs = dict(zip(self.keys, tensors))
        out = self.model(**kwargs, return_dict=True)
        if self.labels:
            return out.loss, out.logits
        return (out.logits,)


def build(arch: str, params: dict, device, dtype, train: bool,
          channels_last: bool = False) -> tuple:
    """(fn, args, grad_params, mutated) of one architecture: the builder's model in
    `dtype` on `device`, in train or eval mode. The weights come from a generator seeded
    with params["seed"], so every dtype gets the same model. `channels_last`: the model's
    4-D weights and its image inputs in channels-last memory (PyTorch's advice for CNNs
    on CPU; `<arch>_infer_cl`, `<arch>_train_cl`)."""
    import transformers as T
    g = torch.Generator().manual_seed(int(params.get("seed", 0)))
    torch.manual_seed(int(params.get("seed", 0)))   # Hugging Face's init draws globally
    model, inputs, labels = _ARCHS[arch](T, params, g)
    _randomise_norms(model, g)
    if type(model).__name__.endswith("Classification") and model.config.problem_type is None:
        # the classification loss sets it at its first call, a change Dynamo's guards
        # see: the second call of a compiled train step would trace again
        model.config.problem_type = "single_label_classification"
    live = [n for n, m in model.named_modules() if isinstance(m, nn.Dropout) and m.p > 0]
    live += random_config_fields(model.config.to_dict())
    if live:   # a step must be deterministic: a config field was missed
        raise AssertionError(f"{arch}: dropout left on in {live[:3]}")
    model = model.to(device=device, dtype=dtype).train(train)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    if not train and arch in SEQ2SEQ:   # the decoder's inputs (training shifts the labels)
        inputs["decoder_input_ids"] = labels
    keys = tuple(inputs) + (("labels",) if train else ())
    args = [t.to(device=device, dtype=dtype) if t.is_floating_point() else t.to(device)
            for t in inputs.values()]
    if channels_last:
        args = [t.contiguous(memory_format=torch.channels_last)
                if t.dim() == 4 and t.is_floating_point() else t for t in args]
    if train:
        args.append(labels.to(device))
    fn = _Step(model, keys, labels=train).train(train)
    grads = [p for p in model.parameters() if p.requires_grad] if train else []
    buffers = [b for b in model.buffers() if b.is_floating_point()]
    return fn, tuple(args), grads, buffers


# the convolutional networks, also run channels-last (`<arch>_infer_cl`, `<arch>_train_cl`;
# not in `names()` unless asked: the same models in another memory layout)
CHANNELS_LAST = ("convnext", "resnet", "mobilenet_v2", "mobilevit")


def _register() -> dict[str, Workload]:
    out = {}
    for arch in MODELS:
        for cl in ((False, True) if arch in CHANNELS_LAST else (False,)):
            for mode, train in (("infer", False), ("train", True)):
                name = f"{arch}_{mode}" + ("_cl" if cl else "")
                out[name] = Workload(
                    name, "train" if train else "inference",
                    f"transformers {arch} ("
                    + ('train step: loss, backward' if train else 'inference')
                    + (", channels-last" if cl else "") + ")",
                    _sizes(arch),
                    lambda p, device, dtype, a=arch, t=train, c=cl: build(a, p, device, dtype,
                                                                          t, c),
                    loss_first=train)
    return out


WORKLOADS: dict[str, Workload] = _register()


def names(mode: str | None = None, channels_last: bool = False) -> list[str]:
    """Model workload names, optionally only "train" or "inference" ones; the
    channels-last runs of the convolutional networks only if `channels_last`."""
    return [n for n, w in WORKLOADS.items() if (mode is None or w.mode == mode)
            and (channels_last or not n.endswith("_cl"))]


def make(name: str, size: str = "small", device="cpu", dtype=torch.float32,
         seed: int = 0, **overrides) -> Instance:
    """Build model workload ``name`` (``gpt2_train``, ``vit_infer``, ...) at ``size``."""
    from bench.workloads import make_from
    return make_from(WORKLOADS, name, size, device, dtype, seed, **overrides)
