#!/usr/bin/python3
"""Copies a dozen freely licensed photographs from ../shared/photos into assets/photos, downscaled
so that the longer side is at most 1600 px, re-encoded as JPEG quality 90 (4:2:0). Run once by a
developer (needs numpy-free Pillow only); the outputs are checked in so a clone needs no ../shared.

Usage: /usr/bin/python3 assets/photos/vendor_photos.py ../shared/photos
"""
import csv
import os
import sys

from PIL import Image

PICKS = [
    "lomiri16__seeding_by_Clements_Engelhardt.jpg",
    "lomiri16__Picture_0B_by_freespace.jpg",
    "lomiri16__aitzgorri_by_Aitzol_Berasategi.jpg",
    "lomiri16__sunset_by_Aitzol_Berasategi.jpg",
    "lomiri16__Wine_by_Jakkub_Mede.jpg",
    "lomiri16__friends_by_Aitzol_Berasategi.jpg",
    "skimage__astronaut.png",
    "skimage__camera.png",
    "skimage__chelsea.png",
    "skimage__coffee.png",
    "skimage__hubble_deep_field.jpg",
    "skimage__retina.jpg",
    "skimage__rocket.jpg",
]
MAX_SIDE = 1600


def main():
    src = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    rows = {r["file"]: r for r in csv.DictReader(open(os.path.join(src, "MANIFEST.tsv")), delimiter="\t")}
    with open(os.path.join(here, "LICENSES.tsv"), "w") as out:
        out.write("file\tsource_file\tdebian_package\tfile_in_package\toriginal_size\tlicence\n")
        for name in PICKS:
            im = Image.open(os.path.join(src, name))
            w, h = im.size
            s = min(1.0, MAX_SIDE / max(w, h))
            if s < 1.0:
                im = im.resize((round(w * s), round(h * s)), Image.LANCZOS)
            if im.mode not in ("RGB", "L"):
                im = im.convert("RGB")
            dst = os.path.splitext(name)[0] + ".jpg"
            im.save(os.path.join(here, dst), quality=90, subsampling=2)
            r = rows[name]
            out.write(f"{dst}\t{name}\t{r['package']}\t{r['file_in_package']}\t{r['size']}\t{r['licence']}\n")
            print(dst, im.size, im.mode)


if __name__ == "__main__":
    main()
