#!/usr/bin/env bash
# Makes the two virtual environments the check runs in, from the machine's offline package mirror:
#   $1 (default /tmp/hf457): transformers 4.57.6     $2 (default /tmp/hf518): transformers 5.18.0
# each with torch 2.13.0+cpu, torchvision 0.28.0 (the release built for torch 2.13), pillow, numpy, jinja2.
#
# Two patches are applied to what is installed, both printed, both about packaging and not behaviour:
#  - transformers 4.57.6 pins huggingface-hub<1.0, and the mirror holds only 1.33.0 and 2.0.0: it is installed
#    without dependencies, its dependencies one by one, huggingface-hub 1.33.0, and the pin in
#    transformers/dependency_versions_table.py is relaxed to >=0.34.0 (the import-time check reads that table).
#    The check reads local folders only, so none of the hub's network code runs.
#  - the mirror's torchvision 0.28.0 is a CUDA build: its C++ ops (nms, roi_align, …) cannot load next to a
#    CPU-only torch. torchvision then works without them (what transformers uses of it, the v2 transforms, is
#    pure torch) except that two `register_fake` decorators in torchvision/_meta_registrations.py are not guarded
#    by `_has_ops()` as every other registration is, so the import fails; they are guarded here.
set -euo pipefail
PY=${PYTHON:-python3}
mk() {
    local dir=$1 tf=$2
    [ -x "$dir/bin/python" ] || "$PY" -m venv "$dir"
    local pip="$dir/bin/pip"
    local common=(torch==2.13.0 torchvision==0.28.0 pillow numpy jinja2)
    if [ "$tf" = 4.57.6 ]; then
        "$pip" install -q "${common[@]}" filelock packaging pyyaml regex requests "tokenizers>=0.22,<=0.23.0" \
            "safetensors>=0.4.3" "tqdm>=4.27" huggingface-hub==1.33.0
        "$pip" install -q --no-deps transformers==4.57.6
        local table
        table=$("$dir/bin/python" -c 'import importlib.util as u; print(u.find_spec("transformers").submodule_search_locations[0])')/dependency_versions_table.py
        sed -i 's/"huggingface-hub>=0.34.0,<1.0"/"huggingface-hub>=0.34.0"/' "$table"
        echo "patched $table: huggingface-hub>=0.34.0"
    else
        "$pip" install -q "${common[@]}" "transformers==$tf"
    fi
    local meta
    meta=$("$dir/bin/python" -c 'import importlib.util as u; print(u.find_spec("torchvision").submodule_search_locations[0])')/_meta_registrations.py
    sed -i 's/^@torch\.library\.register_fake(/@(torch.library.register_fake if torchvision.extension._has_ops() else (lambda *a, **k: (lambda f: f)))(/' "$meta"
    echo "patched $meta: register_fake guarded by _has_ops()"
    "$dir/bin/python" -c 'import transformers, torch, torchvision, PIL, numpy, jinja2; print("ok", "transformers", transformers.__version__, "torch", torch.__version__, "torchvision", torchvision.__version__, "pillow", PIL.__version__, "numpy", numpy.__version__, "jinja2", jinja2.__version__)'
}
mk "${1:-/tmp/hf457}" 4.57.6
mk "${2:-/tmp/hf518}" 5.18.0
