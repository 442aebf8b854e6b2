package dev.stoker.tune;

/**
 * A setting of the feed that {@link Autotuner} may change while the feed runs, with its bounded step: the CPU pool's
 * threads move by one, the fetch concurrency and the prefetch depth by a factor of two (Ray Data adds one actor per
 * decision; tf.data's HILL_CLIMB adds one; a factor of two lets a concurrency of 1 reach 64 in six decisions).
 */
public enum Knob {
    /** Threads of the CPU pool (decode, transform, tokenize, assemble); {@code --threads}. */
    CPU_THREADS("threads", "cpu_threads"),
    /** Samples whose bytes may be in flight per rank stream; {@code --fetch-concurrency}. */
    FETCH_CONCURRENCY("fetch-concurrency", "fetch_concurrency"),
    /** Per-rank ready-batch buffer limit in batches; {@code --prefetch-batches}. */
    PREFETCH_BATCHES("prefetch-batches", "prefetch_batches");

    private final String option;
    private final String metricName;

    Knob(String option, String metricName) {
        this.option = option;
        this.metricName = metricName;
    }

    /** The command-line option that sets its starting point (without the dashes). */
    public String option() { return option; }

    /** Its name in metrics and JSON. */
    public String metricName() { return metricName; }

    /** One step up from {@code value}: +1 thread, ×2 otherwise (the caller bounds it). */
    public int up(int value) { return this == CPU_THREADS ? value + 1 : (int) Math.min(Integer.MAX_VALUE, 2L * value); }

    /** One step down from {@code value}: −1 thread, ÷2 otherwise (the caller bounds it). */
    public int down(int value) { return this == CPU_THREADS ? value - 1 : value / 2; }
}
