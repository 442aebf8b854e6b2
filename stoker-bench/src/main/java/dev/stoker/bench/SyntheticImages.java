package dev.stoker.bench;

import java.util.SplittableRandom;

/** Deterministic benchmark inputs; resize and patchify costs do not depend on pixel content. */
final class SyntheticImages {
    private SyntheticImages() {}

    /** HWC RGB u8: smooth gradients with a little noise, as a photo has. */
    static byte[] photoLike(int width, int height, long seed) {
        var rnd = new SplittableRandom(seed);
        byte[] out = new byte[width * height * 3];
        int i = 0;
        for (int y = 0; y < height; y++)
            for (int x = 0; x < width; x++)
                for (int c = 0; c < 3; c++)
                    out[i++] = (byte) ((x * (c + 1) / 7 + y / 5 + rnd.nextInt(8)) & 0xFF);
        return out;
    }
}
