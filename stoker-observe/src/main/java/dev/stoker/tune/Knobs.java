package dev.stoker.tune;

/**
 * The knobs of one running feed as {@link Autotuner} sees them: their current values, the bounds it must keep them in
 * (the machine's cores, the memory budget) and the setter that applies a new value at once.
 *
 * <p>Threading: {@link #set} is called from the tuner's one thread; an implementation applies the value to the running
 * pipeline (a pool resized, a gate's limit moved) without stopping it.
 */
public interface Knobs {
    int get(Knob k);

    /** The least value {@code k} may take. */
    int min(Knob k);

    /** The most value {@code k} may take (the cores, the memory budget). */
    int max(Knob k);

    void set(Knob k, int value);
}
