package dev.stoker.image.resample;

import java.util.function.BiFunction;

/**
 * The last few axes' weights a resizer made (images of a data set share a handful of sizes), made by {@code make} on a
 * miss and replaced oldest first.
 *
 * <p>Threading: not thread-safe; one per resizer.
 */
public final class TapsCache {
    private static final int SLOTS = 8;

    private final BiFunction<Integer, Integer, Taps> make;
    private final Taps[] slots = new Taps[SLOTS];
    private int next;

    /** {@code make}: the weights of {@code (inSize, outSize)}. */
    public TapsCache(BiFunction<Integer, Integer, Taps> make) {
        this.make = make;
    }

    /** The weights of {@code inSize → outSize}, made once while they stay among the last {@value #SLOTS}. */
    public Taps get(int inSize, int outSize) {
        for (Taps t : slots)
            if (t != null && t.inSize() == inSize && t.outSize() == outSize) return t;
        Taps t = make.apply(inSize, outSize);
        slots[next] = t;
        next = (next + 1) % SLOTS;
        return t;
    }
}
