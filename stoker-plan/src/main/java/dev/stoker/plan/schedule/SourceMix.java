package dev.stoker.plan.schedule;

import java.util.Arrays;

/**
 * Several sources mixed by weight into one epoch of the global order, a pure function of (seed, the
 * sources' sizes, their weights, position).
 *
 * <p>Weights: source {@code i} of {@code size_i} records and weight {@code w_i} takes
 * {@code n_i = max(1, round(w_i·size_i))} places in each epoch of the mix, so weight 1 is one pass over the
 * source per epoch (several sources of weight 1 are their concatenation), 0.5 half of it (as qwen-vl-finetune's
 * {@code name%50}), 3 three passes. The mix's epoch has {@code Σ n_i} places, which {@link SampleSchedule}
 * shuffles as it shuffles one source's records; place {@code d} of source {@code i} in mix epoch {@code e} is
 * that source's draw {@code k = e·n_i + d}.
 *
 * <p>Per-source epochs: draw {@code k} of source {@code i} is in its own epoch {@code q = k / size_i}, at
 * {@code r = k mod size_i} of that epoch's permutation of the source's records. A source that takes all of
 * its records once per mix epoch (weight 1) needs no permutation of its own (the mix's shuffle orders them);
 * one of another weight is permuted per source epoch by a keyed bijection (a Feistel network over the
 * index bits, cycle-walked into {@code [0, size_i)}), so a large source is sampled without replacement
 * across mix epochs until each of its records has been drawn once, and a small one repeats, each
 * repetition in a fresh order. Nothing is materialised: a record is computed in O(1).
 *
 * <p>Records are numbered across sources: source {@code i}'s record {@code j} is {@code base_i + j}, its
 * base the sizes of the sources before it ({@link #base}).
 *
 * <p>Threading: immutable; safe to share.
 */
public final class SourceMix {
    private static final int FEISTEL_ROUNDS = 6;

    private final long seed;
    private final int[] sizes;
    private final double[] weights;
    private final int[] places;
    private final long[] placeBase; // first place of each source in a mix epoch
    private final long[] recordBase; // first record number of each source
    private final int total;

    public SourceMix(long seed, int[] sizes, double[] weights) {
        if (sizes.length == 0 || sizes.length != weights.length)
            throw new IllegalArgumentException("need one weight per source, got " + sizes.length + " sources and " + weights.length + " weights");
        this.seed = seed;
        this.sizes = sizes.clone();
        this.weights = weights.clone();
        this.places = new int[sizes.length];
        this.placeBase = new long[sizes.length];
        this.recordBase = new long[sizes.length];
        long p = 0, r = 0;
        for (int i = 0; i < sizes.length; i++) {
            if (sizes[i] <= 0) throw new IllegalArgumentException("source " + i + " holds no records");
            double w = weights[i];
            if (!(w > 0) || Double.isInfinite(w)) throw new IllegalArgumentException("source " + i + ": weight must be positive, got " + w);
            long n = Math.max(1, Math.round(w * sizes[i]));
            if (n > Integer.MAX_VALUE) throw new IllegalArgumentException("source " + i + ": weight " + w + " × " + sizes[i] + " records is too many per epoch");
            places[i] = (int) n;
            placeBase[i] = p;
            recordBase[i] = r;
            p += n;
            r += sizes[i];
        }
        if (p > Integer.MAX_VALUE) throw new IllegalArgumentException("the mix has " + p + " places per epoch, more than " + Integer.MAX_VALUE);
        if (r > Integer.MAX_VALUE) throw new IllegalArgumentException("the sources hold " + r + " records together, more than " + Integer.MAX_VALUE);
        this.total = (int) p;
    }

    /** One source of weight 1: the identity, the schedule's order as it has always been. */
    public static SourceMix single(long seed, int size) { return new SourceMix(seed, new int[] {size}, new double[] {1}); }

    public int sources() { return sizes.length; }

    /** Places per epoch of the mix: the schedule's data set size. */
    public int places() { return total; }

    /** Records of all sources together. */
    public int records() { return (int) (recordBase[sizes.length - 1] + sizes[sizes.length - 1]); }

    public int size(int source) { return sizes[source]; }

    public double weight(int source) { return weights[source]; }

    /** Places source {@code source} takes in each epoch of the mix. */
    public int placesOf(int source) { return places[source]; }

    /** The record number of source {@code source}'s first record. */
    public int base(int source) { return (int) recordBase[source]; }

    /** The source a record number belongs to. */
    public int sourceOfRecord(int record) {
        int i = Arrays.binarySearch(recordBase, record);
        return i >= 0 ? i : -i - 2;
    }

    /** The source of place {@code place} of a mix epoch. */
    public int sourceOfPlace(int place) {
        int i = Arrays.binarySearch(placeBase, place);
        return i >= 0 ? i : -i - 2; // every source takes at least one place, so the bases are distinct
    }

    /** The record (numbered across sources) at place {@code place} of mix epoch {@code epoch}. */
    public int record(long epoch, int place) {
        if (place < 0 || place >= total) throw new IllegalArgumentException("place " + place + " outside [0, " + total + ")");
        int i = sourceOfPlace(place);
        long d = place - placeBase[i];
        int n = places[i], size = sizes[i];
        if (n == size) return (int) (recordBase[i] + d); // one pass per mix epoch: the mix's shuffle orders it
        long k = epoch * n + d;
        long q = k / size;
        int r = (int) (k % size);
        return (int) (recordBase[i] + permute(i, q, r));
    }

    /** Source {@code i}'s epoch {@code q} of a draw in mix epoch {@code epoch} at {@code place}; for accounting. */
    public long sourceEpoch(long epoch, int place) {
        int i = sourceOfPlace(place);
        return (epoch * places[i] + (place - placeBase[i])) / sizes[i];
    }

    /** {@code r}'s image under source {@code i}'s permutation of its epoch {@code q}: a bijection of {@code [0, size_i)}. */
    int permute(int i, long q, int r) {
        int size = sizes[i];
        if (size == 1) return 0;
        int bits = 64 - Long.numberOfLeadingZeros(size - 1L);
        if ((bits & 1) == 1) bits++;
        int half = bits / 2;
        long mask = (1L << half) - 1;
        long key = SampleSchedule.mix64(SampleSchedule.mix64(seed ^ 0x5DEECE66DL) + 0x9E3779B97F4A7C15L * (i + 1) + SampleSchedule.mix64(q + 1));
        long x = r;
        do { // cycle-walk: the domain is at most 4 × size, so a few rounds at most on average
            long left = x >>> half, right = x & mask;
            for (int round = 0; round < FEISTEL_ROUNDS; round++) {
                long f = SampleSchedule.mix64(key + round * 0xD1B54A32D192ED03L + right) & mask;
                long next = left ^ f;
                left = right;
                right = next;
            }
            x = left << half | right;
        } while (x >= size);
        return (int) x;
    }
}
