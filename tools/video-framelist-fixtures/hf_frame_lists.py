"""What the HF video processors alone do with a video given as a list of PIL images (issue 29: which modes take frame
lists). Run with each venv (transformers 5.18.0 and 4.57.6):  VENV/bin/python tools/video-framelist-fixtures/hf_frame_lists.py

Measured (both releases the same): Qwen2VLVideoProcessor with do_sample_frames=True raises (fps given: ValueError, no
metadata; fps not given: TypeError), Qwen3VLVideoProcessor with sampling on assumes fps 24 with a warning; with
do_sample_frames=False both take every frame. So `--video-sampler hf` (sampling on, fps from the video's metadata) has
no defined result for a frame list and Stoker refuses it; qwen-vl-utils defines one (its list branch) and Stoker
follows it there.
"""
import numpy as np
import transformers
from PIL import Image
from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

print("transformers", transformers.__version__)
frames = [Image.fromarray(np.full((56, 56, 3), 10 * k, np.uint8)) for k in range(5)]
for VP in (Qwen2VLVideoProcessor, Qwen3VLVideoProcessor):
    for kw in (dict(do_sample_frames=True, fps=2.0), dict(do_sample_frames=True), dict(do_sample_frames=False)):
        try:
            o = VP()(videos=[frames], return_tensors="pt", **kw)
            print(VP.__name__, kw, "OK grid", o["video_grid_thw"].tolist())
        except Exception as e:  # noqa: BLE001 - what it raises is the result
            print(VP.__name__, kw, "ERR", type(e).__name__, str(e)[:160])
