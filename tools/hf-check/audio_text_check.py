"""Audio token counts, placeholder expansion and M-RoPE positions of Qwen2-Audio, Qwen2.5-Omni and Qwen3-Omni, made by the
real transformers code (issue 32 item 3), written as the fixture stoker-text's OmniFixturesTest reads.

Run with a Python that has transformers 5.18.0, torch and numpy (a venv made from the offline mirror; no weights, no
network, CPU only, a few seconds):

    /work/venv-audiotext/bin/python tools/hf-check/audio_text_check.py \
        stoker-text/src/test/resources/dev/stoker/text/omni/omni-fixtures.json

What is real and what is driven by hand:
- valid mel frames per clip length: WhisperFeatureExtractor itself, with each family's settings and padding
  (Qwen2-Audio: chunk_length 30, padding "max_length"; Qwen2.5-Omni: chunk_length 300, "max_length"; Qwen3-Omni:
  chunk_length 300, padding True, truncation False), on silent clips of the given sample counts;
- tokens per clip: Qwen2_5OmniAudioEncoder._get_feat_extract_output_lengths (the formula Qwen2-Audio's and Qwen2.5-Omni's
  processors inline) and processing_qwen3_omni_moe._get_feat_extract_output_lengths;
- expansion: the processors' own replace_multimodal_special_tokens (Qwen2_5OmniProcessor, Qwen3OmniMoeProcessor), called
  on a stand-in `self` that holds the published token strings and merge size 2, with the tokens per clip above, the
  grids and the seconds per grid of each case;
- positions: the thinkers' own get_rope_index (Qwen2_5OmniPreTrainedModelForConditionalGeneration,
  Qwen3OmniMoePreTrainedModelForConditionalGeneration), on a stand-in `self` with the published token ids,
  position_id_per_seconds (25, 13), seconds_per_chunk 2, n_window 50 and spatial merge size 2.
- chat templates and tokenization ("chats"): the published templates (Qwen2-Audio: Qwen2AudioProcessor.default_chat_template;
  Qwen2.5-Omni: the one of transformers' tests/models/qwen2_5_omni/test_processor_qwen2_5_omni.py, as published with the
  model; both copied beside the fixture as *.jinja) rendered by transformers' render_jinja_template, then tokenized by a
  `tokenizers` Tokenizer made from stoker-text's bundled Qwen2 tokenizer.json with the family's added tokens at their
  published ids (what the family's tokenizer.json is: the same vocabulary and merges, other added-token names).
- end to end ("end_to_end", when torchvision can be imported: the video processor needs it): the real
  Qwen2_5OmniProcessor / Qwen3OmniMoeProcessor built from WhisperFeatureExtractor, Qwen2VLImageProcessorPil,
  Qwen2VLVideoProcessor (patch 14 / 16) and a Qwen2TokenizerFast holding the family's added tokens, called on a rendered
  chat with silent clips of given sample counts, a black image and black video frames, use_audio_in_video on; the thinker's
  get_rope_index on its output. Qwen3-Omni's chat is rendered by Stoker's own (unchecked) rendering, written as a Jinja
  template here, because its published template was not available: the case checks the processor, not the template.
For the expansion and position cases, text is tokenized by a toy tokenizer (one id per word, from 1000) that splits the family's special tokens out as the real
one does: the rules under test act on ids of special tokens only, and the real tokenizer's text is stoker-text's own test.
"""
import json
import os
import sys
import types

import numpy as np
import torch
import transformers
from transformers import WhisperFeatureExtractor
from transformers.models.qwen2_5_omni import modeling_qwen2_5_omni as m25
from transformers.models.qwen2_5_omni import processing_qwen2_5_omni as p25
from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as m3
from transformers.models.qwen3_omni_moe import processing_qwen3_omni_moe as p3

FAMILIES = {
    "qwen2.5-omni": dict(audio=("<|AUDIO|>", 151646), abos=("<|audio_bos|>", 151647), aeos=("<|audio_eos|>", 151648),
                         image=("<|IMAGE|>", 151655), video=("<|VIDEO|>", 151656), vbos=("<|vision_bos|>", 151652),
                         veos=("<|vision_eos|>", 151653), pps=25, proc=p25.Qwen2_5OmniProcessor,
                         model=m25.Qwen2_5OmniPreTrainedModelForConditionalGeneration),
    "qwen3-omni": dict(audio=("<|audio_pad|>", 151675), abos=("<|audio_start|>", 151669), aeos=("<|audio_end|>", 151670),
                       image=("<|image_pad|>", 151655), video=("<|video_pad|>", 151656), vbos=("<|vision_start|>", 151652),
                       veos=("<|vision_end|>", 151653), pps=13, proc=p3.Qwen3OmniMoeProcessor,
                       model=m3.Qwen3OmniMoePreTrainedModelForConditionalGeneration),
}
OTHER_SPECIALS = {"<|im_start|>": 151644, "<|im_end|>": 151645}


def tokens_25(frames):
    _, out = m25.Qwen2_5OmniAudioEncoder._get_feat_extract_output_lengths(None, torch.tensor(frames))
    return int(out)


def tokens_3(frames):
    import inspect
    f = p3._get_feat_extract_output_lengths
    if len(inspect.signature(f).parameters) == 1:  # 4.57.6: n_window 50 fixed inside
        return int(f(np.array(frames)))
    return int(f(np.array(frames), 50))


def mel_frames(samples):
    """Valid frames (feature_attention_mask.sum) per family for a silent clip of `samples` samples at 16 kHz; -1 where
    the feature extractor raises (a clip too short for torch.stft's reflect padding when nothing pads it)."""
    out = {}
    clip = np.zeros(samples, dtype=np.float32)
    for fam, chunk, kwargs in (("qwen2-audio", 30, dict(padding="max_length")),
                               ("qwen2.5-omni", 300, dict(padding="max_length")),
                               ("qwen3-omni", 300, dict(padding=True, truncation=False))):
        fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, n_fft=400, chunk_length=chunk,
                                     dither=0.0)
        try:
            got = fe([clip], sampling_rate=16000, return_attention_mask=True, return_tensors="np", **kwargs)
        except RuntimeError:  # a clip shorter than n_fft/2 + 1 cannot be reflect-padded by torch.stft
            out[fam] = -1
            continue
        frames = int(got["attention_mask"].sum())
        assert got["input_features"].shape[-1] >= frames, (fam, samples)
        out[fam] = frames
    return out


class ToyTokenizer:
    def __init__(self, specials):
        self.specials = specials
        self.words = {}

    def __call__(self, text):
        ids, pos = [], 0
        while pos < len(text):
            hits = [(text.find(s, pos), s) for s in self.specials if text.find(s, pos) >= 0]
            at, tok = min(hits) if hits else (len(text), None)
            for w in text[pos:at].split():
                ids.append(self.words.setdefault(w, 1000 + len(self.words)))
            if tok is None:
                break
            ids.append(self.specials[tok])
            pos = at + len(tok)
        return ids


def stand_in_processor(f):
    me = types.SimpleNamespace(audio_token=f["audio"][0], image_token=f["image"][0], video_token=f["video"][0],
                               vision_bos_token=f["vbos"][0], vision_eos_token=f["veos"][0], audio_bos_token=f["abos"][0],
                               audio_eos_token=f["aeos"][0], image_processor=types.SimpleNamespace(merge_size=2),
                               video_processor=types.SimpleNamespace(merge_size=2, temporal_patch_size=2))
    me.get_chunked_index = types.MethodType(f["proc"].get_chunked_index, me)
    return me


def stand_in_model(f):
    cfg = types.SimpleNamespace(image_token_id=f["image"][1], video_token_id=f["video"][1], audio_token_id=f["audio"][1],
                                vision_start_token_id=f["vbos"][1], audio_start_token_id=f["abos"][1],
                                position_id_per_seconds=f["pps"], seconds_per_chunk=2,
                                audio_config=types.SimpleNamespace(n_window=50))
    me = types.SimpleNamespace(spatial_merge_size=2, config=cfg)
    me.get_llm_pos_ids_for_vision = types.MethodType(f["model"].get_llm_pos_ids_for_vision, me)
    me.get_chunked_index = types.MethodType(f["model"].get_chunked_index, me)
    return me


# A case: its media in placeholder order. ("audio", frames) | ("image", t, h, w) | ("video", t, h, w, fps, audioFrames|None)
CASES = [
    ("audio-only", [("audio", 1000)]),
    ("two-clips-edge-lengths", [("audio", 3), ("audio", 99)]),
    ("clips-around-windows", [("audio", 100), ("audio", 101), ("audio", 250)]),
    ("image-then-audio", [("image", 1, 4, 6), ("audio", 437)]),
    ("video-no-audio", [("video", 3, 4, 4, 2.0, None), ("audio", 800)]),
    ("audio-in-video", [("video", 6, 4, 6, 2.0, 1200)]),
    ("audio-in-video-short-audio", [("video", 8, 2, 4, 2.0, 240)]),
    ("audio-in-video-long-audio", [("video", 2, 2, 2, 2.0, 2000)]),
    ("audio-in-video-fps-1.5", [("video", 5, 4, 4, 1.5, 1333)]),
    ("audio-in-video-fps-0.5-jumps-chunks", [("video", 4, 2, 2, 0.5, 1600)]),
    ("audio-in-video-default-fps-1", [("video", 5, 2, 4, 1.0, 1000)]),
    ("image-video-audio-mixed", [("image", 1, 2, 2), ("video", 3, 2, 2, 2.0, 600), ("audio", 150)]),
]


def build(fam_name, media):
    f = FAMILIES[fam_name]
    specials = {v[0]: v[1] for k, v in f.items() if isinstance(v, tuple)}
    specials.update(OTHER_SPECIALS)
    tok = ToyTokenizer(specials)
    aiv = any(m[0] == "video" and m[5] is not None for m in media)
    count = tokens_25 if fam_name == "qwen2.5-omni" else tokens_3
    parts = ["<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"]
    audio_lengths, audio_frames, image_grids, video_grids, spgs = [], [], [], [], []
    for k, m in enumerate(media):
        parts.append("w%d " % k)
        if m[0] == "audio":
            parts.append(f["abos"][0] + f["audio"][0] + f["aeos"][0])
            audio_lengths.append(count(m[1]))
            audio_frames.append(m[1])
        elif m[0] == "image":
            parts.append(f["vbos"][0] + f["image"][0] + f["veos"][0])
            image_grids.append(list(m[1:4]))
        else:
            parts.append(f["vbos"][0] + f["video"][0] + f["veos"][0])
            video_grids.append(list(m[1:4]))
            spgs.append(2 / m[4])  # temporal_patch_size / fps, as both processors compute video_second_per_grid
            if m[5] is not None:
                audio_lengths.append(count(m[5]))
                audio_frames.append(m[5])
    parts.append("What is it?<|im_end|>\n<|im_start|>assistant\nIt is x.<|im_end|>\n")
    text = "".join(parts)
    before = tok(text)
    expanded_text = f["proc"].replace_multimodal_special_tokens(
        stand_in_processor(f), [text], iter(audio_lengths), iter([torch.tensor(g) for g in image_grids]),
        iter([torch.tensor(g) for g in video_grids]), video_second_per_grid=iter(spgs), use_audio_in_video=aiv,
        position_id_per_seconds=f["pps"], seconds_per_chunk=2.0)[0]
    after = tok(expanded_text)
    ids = torch.tensor([after])
    pos, _ = f["model"].get_rope_index(
        stand_in_model(f), input_ids=ids,
        image_grid_thw=torch.tensor(image_grids) if image_grids else None,
        video_grid_thw=torch.tensor(video_grids) if video_grids else None,
        attention_mask=torch.ones_like(ids), use_audio_in_video=aiv,
        audio_seqlens=torch.tensor(audio_frames) if audio_frames else None,
        second_per_grids=torch.tensor(spgs) if spgs else None)
    pos = pos[:, 0, :]
    out = {"before": before, "expanded": after}
    if fam_name == "qwen3-omni":
        out["positions_f32_bits"] = [[int(x) for x in row.float().numpy().view(np.int32)] for row in pos]
    else:
        out["positions"] = [[int(x) for x in row] for row in pos.long()]
    return out


ROOT = __file__.rsplit("/tools/", 1)[0]
BUNDLED = ROOT + "/stoker-text/src/main/resources/dev/stoker/text/qwen2/tokenizer.json.gz"
ADDED = {
    "qwen2-audio": {151646: "<|AUDIO|>", 151647: "<|audio_bos|>", 151648: "<|audio_eos|>"},
    "qwen2.5-omni": {151646: "<|AUDIO|>", 151647: "<|audio_bos|>", 151648: "<|audio_eos|>", 151652: "<|vision_bos|>",
                     151653: "<|vision_eos|>", 151655: "<|IMAGE|>", 151656: "<|VIDEO|>"},
}
CHATS = [
    [{"role": "user", "content": [{"type": "audio", "audio": "mllm_demo_data/1.mp3"}, {"type": "text", "text": "What's that sound?"}]},
     {"role": "assistant", "content": [{"type": "text", "text": "It is the sound of glass shattering."}]}],
    [{"role": "system", "content": [{"type": "text", "text": "You are Qwen, a virtual human."}]},
     {"role": "user", "content": [{"type": "text", "text": "Two clips:\n"}, {"type": "audio", "audio": "a.wav"},
                                  {"type": "audio", "audio": "b.flac"}, {"type": "text", "text": " Same speaker? 说话人 \u00e9"}]},
     {"role": "assistant", "content": [{"type": "text", "text": "No.  \n"}]},
     {"role": "user", "content": [{"type": "audio", "audio": "c.wav"}, {"type": "text", "text": "And this one?"}]},
     {"role": "assistant", "content": [{"type": "text", "text": "Yes 😀"}]}],
]
OMNI_ONLY_CHATS = [
    [{"role": "user", "content": [{"type": "video", "video": "4.mp4"}, {"type": "audio", "audio": "4.mp3"},
                                  {"type": "image", "image": "x.jpg"}, {"type": "text", "text": "What is the video describing?"}]},
     {"role": "assistant", "content": [{"type": "text", "text": "A girl who is drawing a picture of a guitar."}]}],
]


def family_tokenizer(fam):
    import gzip
    from tokenizers import Tokenizer
    spec = json.loads(gzip.open(BUNDLED).read())
    for tok in spec["added_tokens"]:
        if tok["id"] in ADDED[fam]:
            tok["content"] = ADDED[fam][tok["id"]]
    spec["model"]["vocab"] = {k: v for k, v in spec["model"]["vocab"].items()}
    return Tokenizer.from_str(json.dumps(spec))


def chats(template_dir):
    from transformers.utils.chat_template_utils import render_jinja_template
    out = []
    for fam in ("qwen2-audio", "qwen2.5-omni"):
        path = template_dir + "/" + fam + ".jinja"
        if not os.path.isfile(path):
            sys.exit(path + " is missing: copy it from stoker-text/src/test/resources/dev/stoker/text/omni/ (Qwen2.5-Omni's "
                     "template is the string of transformers' test_processor_qwen2_5_omni.py, kept there)")
        with open(path) as fh:
            template = fh.read()
        tok = family_tokenizer(fam)
        for chat in CHATS + (OMNI_ONLY_CHATS if fam == "qwen2.5-omni" else []):
            text = render_jinja_template(conversations=[chat], chat_template=template)[0][0]
            ids = tok.encode(text, add_special_tokens=False).ids
            out.append({"family": fam, "messages": chat, "text": text, "ids": ids})
    return out


QWEN3_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% for content in message['content'] %}"
                  "{% if content['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
                  "{% elif content['type'] == 'audio' %}<|audio_start|><|audio_pad|><|audio_end|>"
                  "{% elif content['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
                  "{% else %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}")
ADDED["qwen3-omni"] = {151669: "<|audio_start|>", 151670: "<|audio_end|>", 151675: "<|audio_pad|>"}
E2E = [
    # (name, messages, clip sample counts in audio order (a video's track first where it stands), fps passed or None)
    ("audio-image", [{"role": "user", "content": [{"type": "audio", "audio": "a.wav"}, {"type": "image", "image": "x.jpg"},
                                                  {"type": "text", "text": "What is it?"}]},
                     {"role": "assistant", "content": [{"type": "text", "text": "A dog barking."}]}], [69925], 2.0),
    ("video-with-audio-then-clip", [{"role": "user", "content": [{"type": "video", "video": "v.mp4", "use_audio_in_video": True},
                                                                 {"type": "audio", "audio": "a.wav"}, {"type": "text", "text": "Same?"}]},
                                    {"role": "assistant", "content": [{"type": "text", "text": "No."}]}], [64000, 48007], 2.0),
    ("video-with-audio-default-fps", [{"role": "user", "content": [{"type": "video", "video": "v.mp4", "use_audio_in_video": True},
                                                                   {"type": "text", "text": "Say it."}]},
                                      {"role": "assistant", "content": [{"type": "text", "text": "Hi."}]}], [97777], None),
]


def end_to_end():
    try:
        import torchvision  # noqa: F401
    except ImportError:
        print("end_to_end skipped: torchvision is not installed")
        return None
    from transformers import Qwen2TokenizerFast
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
    from tokenizers import Tokenizer
    import gzip
    out = []
    for fam in ("qwen2.5-omni", "qwen3-omni"):
        f = FAMILIES[fam]
        spec = json.loads(gzip.open(BUNDLED).read())
        names = dict(ADDED["qwen2.5-omni"]) if fam == "qwen2.5-omni" else {}
        for t in spec["added_tokens"]:
            if t["id"] in names:
                t["content"] = names[t["id"]]
        if fam == "qwen3-omni":
            # ids are assigned in order by `tokenizers`: 151671-151674 (Qwen3-Omni's TTS tokens, unused here) hold fillers
            fill = {i: "<|filler_%d|>" % i for i in range(151671, 151675)}
            for i, c in sorted({**ADDED["qwen3-omni"], **fill}.items()):
                spec["added_tokens"].append({"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                                             "normalized": False, "special": True})
        extra = {"image_token": f["image"][0], "audio_token": f["audio"][0], "video_token": f["video"][0],
                 "vision_bos_token": f["vbos"][0], "vision_eos_token": f["veos"][0], "audio_bos_token": f["abos"][0],
                 "audio_eos_token": f["aeos"][0]}
        tok = Qwen2TokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), extra_special_tokens=extra)
        patch = 14 if fam == "qwen2.5-omni" else 16
        fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, chunk_length=300, dither=0.0)
        ip = Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=12845056, patch_size=patch)
        vp = Qwen2VLVideoProcessor(patch_size=patch)
        if fam == "qwen2.5-omni":
            with open(ROOT + "/stoker-text/src/test/resources/dev/stoker/text/omni/qwen2.5-omni.jinja") as fh:
                template = fh.read()
        else:
            template = QWEN3_TEMPLATE
        proc = f["proc"](image_processor=ip, video_processor=vp, feature_extractor=fe, tokenizer=tok, chat_template=template)
        for name, messages, clips, fps in E2E:
            hf_messages = [{"role": m["role"], "content": [{k: v for k, v in c.items() if k != "use_audio_in_video"} for c in m["content"]]}
                           for m in messages]
            text = proc.apply_chat_template(hf_messages, tokenize=False)
            kinds = [c["type"] for m in messages for c in m["content"]]
            kwargs = dict(audio=[np.zeros(n, dtype=np.float32) for n in clips], return_tensors="np")
            if "image" in kinds:
                kwargs["images"] = [np.zeros((56, 84, 3), dtype=np.uint8)]
            aiv = "video" in kinds
            if aiv:
                kwargs.update(videos=[np.zeros((8, 56, 56, 3), dtype=np.uint8)], use_audio_in_video=True, do_sample_frames=False)
                if fps is not None:
                    kwargs["fps"] = fps
            got = proc(text=[text], **kwargs)
            ids = torch.tensor(got["input_ids"])
            image_grid = torch.tensor(got["image_grid_thw"]) if "image_grid_thw" in got else None
            video_grid = torch.tensor(got["video_grid_thw"]) if "video_grid_thw" in got else None
            spg = torch.tensor(got["video_second_per_grid"]) if "video_second_per_grid" in got else None
            frames = torch.tensor(got["feature_attention_mask"].sum(-1))
            pos, _ = f["model"].get_rope_index(stand_in_model(f), input_ids=ids, image_grid_thw=image_grid, video_grid_thw=video_grid,
                                                attention_mask=torch.ones_like(ids), use_audio_in_video=aiv, audio_seqlens=frames,
                                                second_per_grids=spg)
            pos = pos[:, 0, :]
            case = {"family": fam, "name": name, "messages": messages, "clip_samples": clips, "fps": fps,
                    "input_ids": [int(x) for x in got["input_ids"][0]], "mel_frames": [int(x) for x in frames],
                    "image_grid_thw": [] if image_grid is None else image_grid.tolist(),
                    "video_grid_thw": [] if video_grid is None else video_grid.tolist(),
                    "video_second_per_grid": [] if spg is None else [float(x) for x in spg]}
            if fam == "qwen3-omni":
                case["positions_f32_bits"] = [[int(x) for x in row.float().numpy().view(np.int32)] for row in pos]
            else:
                case["positions"] = [[int(x) for x in row] for row in pos.long()]
            out.append(case)
    # Qwen2-Audio: its processor on the CHATS (audio only), 1-D positions (a Qwen2 language model: nothing to compare)
    spec = json.loads(gzip.open(BUNDLED).read())
    for t in spec["added_tokens"]:
        if t["id"] in ADDED["qwen2-audio"]:
            t["content"] = ADDED["qwen2-audio"][t["id"]]
    tok = Qwen2TokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)))
    fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, chunk_length=30)
    proc = transformers.Qwen2AudioProcessor(feature_extractor=fe, tokenizer=tok)
    for k, (chat, clips) in enumerate(zip(CHATS, ([69925], [16001, 480001, 481]))):
        text = proc.apply_chat_template(chat, tokenize=False)
        got = proc(text=[text], audio=[np.zeros(n, dtype=np.float32) for n in clips], return_tensors="np")
        out.append({"family": "qwen2-audio", "name": "chat-%d" % k, "messages": chat, "clip_samples": clips, "fps": None,
                    "input_ids": [int(x) for x in got["input_ids"][0]],
                    "mel_frames": [int(x) for x in got["feature_attention_mask"].sum(-1)],
                    "image_grid_thw": [], "video_grid_thw": [], "video_second_per_grid": []})
    return out


def write_templates(template_dir):
    """The published templates, as the Java test reads them (Qwen2.5-Omni's is the string of transformers' test)."""
    with open(template_dir + "/qwen2-audio.jinja", "w") as fh:
        fh.write(transformers.Qwen2AudioProcessor.default_chat_template.fget(None))


def main(out_path):
    fixture = {
        "made_by": "tools/hf-check/audio_text_check.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "tokens": [],
        "mel_frames": [],
        "cases": [],
    }
    for frames in (1, 2, 3, 4, 5, 7, 8, 9, 99, 100, 101, 107, 199, 200, 201, 437, 1000, 1001, 2999, 3000, 3001, 29999, 30000, 30001,
                   123457):
        fixture["tokens"].append({"frames": frames, "stride4": tokens_25(frames), "qwen3": tokens_3(frames)})
    for samples in (1, 200, 201, 159, 160, 161, 16000, 16001, 160 * 437 + 5, 479999, 480000, 480001, 4800000, 4800161):
        fixture["mel_frames"].append({"samples": samples, **mel_frames(samples)})
    template_dir = out_path.rsplit("/", 1)[0]
    write_templates(template_dir)
    fixture["chats"] = chats(template_dir)
    e2e = end_to_end()
    if e2e is not None:
        fixture["end_to_end"] = e2e
        fixture["torchvision"] = __import__("torchvision").__version__
    for fam in FAMILIES:
        for name, media in CASES:
            enc = [list(m) if m[0] != "video" else [m[0], m[1], m[2], m[3], m[4], -1 if m[5] is None else m[5]] for m in media]
            fixture["cases"].append({"family": fam, "name": name, "media": enc, **build(fam, media)})
    with open(out_path, "w") as fh:
        json.dump(fixture, fh, separators=(",", ":"))
        fh.write("\n")
    print("wrote", out_path, len(fixture["cases"]), "cases, transformers", transformers.__version__)


if __name__ == "__main__":
    main(sys.argv[1])
