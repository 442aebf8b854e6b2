package dev.stoker.plan.schedule;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchLayout.Resume;
import dev.stoker.core.batch.BatchLayout;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The sample order of a run, a pure function of (seed, epoch, dataset size, ranks, batch size).
 *
 * <p>Order: each epoch is a fresh permutation of {@code [0, datasetSize)}, a Fisher–Yates shuffle
 * driven by a SplitMix64 stream seeded from {@code mix(seed, epoch)}. The generator is written out
 * here rather than taken from {@code java.util.SplittableRandom} so that a JDK upgrade cannot change
 * the order of a run being resumed.
 *
 * <p>Global cursor: all ranks walk one global order. A global step consumes
 * {@code ranks·batchSize} consecutive positions of the epoch's permutation; rank r gets the
 * contiguous block {@code [r·B, (r+1)·B)} of that step. Contiguous blocks (rather than striding
 * r, r+R, …) make a step's order the concatenation of the ranks' batches, so the global position
 * after a step is the same number whatever the rank count, and a run resized to R' ranks continues
 * from that position with nothing lost or repeated. The tail of an epoch too short for a whole
 * global step ({@link #droppedPerEpoch()} samples) is not scheduled (drop_last); the next epoch
 * starts at position 0 of its own permutation.
 *
 * <p>Step labels: a batch's global step is a label, the number of global steps from the schedule's
 * origin (epoch 0, position 0), every epoch starting at 0. A job resized to another rank count
 * continues from a position that its new step size did not take it to, so counting its steps from the
 * origin would repeat labels already used (audit #32). A schedule {@link #labelled labelled} at a
 * cursor counts from there instead: the step starting at that cursor has the given label, and each
 * later step one more (an epoch's last whole step is followed by the next epoch's first).
 *
 * <p>Sources: over several sources {@linkplain SourceMix mixed} by weight, the permutation orders the mix's
 * places, and each place names a record of one source ({@link SourceMix#record}); the batch holds the
 * records' numbers across sources. One source is the mix of one, whose places are its records.
 *
 * <p>As a {@link StepSchedule}: each rank's share of a step is its batch of B samples; every step takes the same
 * positions, so cursors, labels and epochs are arithmetic, and a step leaves no sample out.
 *
 * <p>Threading: immutable apart from a two-entry cache of permutations; safe to share.
 */
public final class SampleSchedule implements StepSchedule {
    /** Positions {@link #scanLimit()} allows: a batch is arithmetic, so a walk of millions of positions takes moments. */
    static final long SCAN_LIMIT = 1L << 22;

    private static final long GOLDEN_GAMMA = 0x9E3779B97F4A7C15L;

    private final long seed;
    private final int datasetSize;
    private final int ranks;
    private final int batchSize;
    private final int positionsPerStep;
    private final Object cacheLock = new Object();
    private final long[] cachedEpochs = {-1, -1};
    private final int[][] cachedPermutations = new int[2][];
    private int cacheVictim;
    /** The cursor whose step has the label {@link #labelStep}; null: labels count from the origin. */
    private final ScheduleCursor labelAt;
    private final long labelStep;
    /** The sources behind the places; null: one source, each place its record. */
    private final SourceMix mix;

    public SampleSchedule(long seed, int datasetSize, int ranks, int batchSize) {
        this(seed, datasetSize, ranks, batchSize, null, 0, null);
    }

    /** The order of {@code mix}'s places, each batch holding the records they name. */
    public SampleSchedule(long seed, SourceMix mix, int ranks, int batchSize) {
        this(seed, mix.places(), ranks, batchSize, null, 0, mix.sources() == 1 && mix.placesOf(0) == mix.size(0) ? null : mix);
    }

    private SampleSchedule(long seed, int datasetSize, int ranks, int batchSize, ScheduleCursor labelAt, long labelStep, SourceMix mix) {
        if (datasetSize <= 0) throw new IllegalArgumentException("dataset size must be positive, got " + datasetSize);
        if (ranks <= 0) throw new IllegalArgumentException("ranks must be positive, got " + ranks);
        if (batchSize <= 0) throw new IllegalArgumentException("batch size must be positive, got " + batchSize);
        if ((long) ranks * batchSize > datasetSize)
            throw new IllegalArgumentException("ranks × batch size = " + (long) ranks * batchSize
                    + " exceeds the dataset size " + datasetSize + ": no global step fits in an epoch");
        this.seed = seed;
        this.datasetSize = datasetSize;
        this.ranks = ranks;
        this.batchSize = batchSize;
        this.positionsPerStep = ranks * batchSize;
        this.labelAt = labelAt;
        this.labelStep = labelStep;
        this.mix = mix;
    }

    /** The sources mixed, or null for one source taken once per epoch. */
    public SourceMix mix() { return mix; }

    /** The order is this schedule itself: batches are cut from it B by B. */
    @Override
    public SampleSchedule order() { return this; }

    /**
     * This order with the step at {@code at} labelled {@code step} (and the steps after it counted from
     * there): where a trainer resumed with another rank count continues its labels. A negative
     * {@code step} gives the labels counted from the origin.
     */
    @Override
    public SampleSchedule labelled(ScheduleCursor at, long step) {
        if (step < 0) return labelAt == null ? this : new SampleSchedule(seed, datasetSize, ranks, batchSize, null, 0, mix);
        requireFits(at);
        return new SampleSchedule(seed, datasetSize, ranks, batchSize, at, step, mix);
    }

    /** The cursor this schedule's labels count from ({@link #labelled}); null: the origin. */
    @Override
    public ScheduleCursor labelAt() { return labelAt; }

    /** The label of the step at {@link #labelAt()}; −1 when labels count from the origin. */
    @Override
    public long labelStep() { return labelAt == null ? -1 : labelStep; }

    /**
     * The label of the global step starting at {@code c}: steps since the origin, or since the cursor
     * this schedule is {@link #labelled} at (a cursor before that one is counted from the origin).
     */
    @Override
    public long globalStep(ScheduleCursor c) {
        long natural = c.epoch() * stepsPerEpoch() + c.position() / positionsPerStep;
        if (labelAt == null || c.epoch() < labelAt.epoch() || (c.epoch() == labelAt.epoch() && c.position() < labelAt.position()))
            return natural;
        if (c.epoch() == labelAt.epoch()) return labelStep + (c.position() - labelAt.position()) / positionsPerStep;
        long restOfFirst = (datasetSize - labelAt.position()) / positionsPerStep; // whole steps from labelAt in its epoch
        return labelStep + restOfFirst + (c.epoch() - labelAt.epoch() - 1) * stepsPerEpoch() + c.position() / positionsPerStep;
    }

    public long seed() { return seed; }

    public int datasetSize() { return datasetSize; }

    @Override
    public int ranks() { return ranks; }

    public int batchSize() { return batchSize; }

    /** Samples one global step consumes: ranks × batch size. */
    @Override
    public int positionsPerStep() { return positionsPerStep; }

    /** Whole global steps in an epoch that starts at position 0. */
    @Override
    public long stepsPerEpoch() { return datasetSize / positionsPerStep; }

    /** The positions of the epoch's whole steps: all but the {@link #droppedPerEpoch()} at its end. */
    @Override
    public long positionsPerEpoch() { return stepsPerEpoch() * positionsPerStep; }

    @Override
    public long scanLimit() { return SCAN_LIMIT; }

    /** Samples at the end of each epoch's permutation that are never scheduled (drop_last). */
    public int droppedPerEpoch() { return datasetSize % positionsPerStep; }

    /** The cursor at {@code globalStep} steps from the origin, every epoch starting at position 0. */
    @Override
    public ScheduleCursor cursorAt(long globalStep) {
        if (globalStep < 0) throw new IllegalArgumentException("global step must be >= 0, got " + globalStep);
        long spe = stepsPerEpoch();
        return new ScheduleCursor(globalStep / spe, (globalStep % spe) * positionsPerStep);
    }

    /** The cursor after the global step starting at {@code c}: the next position, or the next epoch's start. */
    public ScheduleCursor next(ScheduleCursor c) {
        requireFits(c);
        return aligned(new ScheduleCursor(c.epoch(), c.position() + positionsPerStep));
    }

    /**
     * The cursor itself when a whole global step fits from it, else the next epoch's start (drop_last):
     * where a cursor saved with another rank count, or after the last step of an epoch, continues.
     */
    @Override
    public ScheduleCursor aligned(ScheduleCursor c) {
        return c.position() + positionsPerStep <= datasetSize ? c : new ScheduleCursor(c.epoch() + 1, 0);
    }

    /** Rank {@code rank}'s dataset indices for step {@code step} (0-based, within the epoch) of {@code epoch}. */
    public int[] batchFor(long epoch, long step, int rank) {
        if (step < 0 || step >= stepsPerEpoch())
            throw new IllegalArgumentException("step " + step + " outside [0, " + stepsPerEpoch() + ")");
        return batchAt(new ScheduleCursor(epoch, step * positionsPerStep), rank);
    }

    /** Rank {@code rank}'s dataset indices (records, numbered across sources) for the global step starting at {@code c}. */
    public int[] batchAt(ScheduleCursor c, int rank) {
        requireFits(c);
        if (rank < 0 || rank >= ranks) throw new IllegalArgumentException("rank " + rank + " outside [0, " + ranks + ")");
        int[] perm = permutation(c.epoch());
        int from = (int) c.position() + rank * batchSize;
        int[] out = new int[batchSize];
        System.arraycopy(perm, from, out, 0, batchSize);
        if (mix != null) for (int i = 0; i < batchSize; i++) out[i] = mix.record(c.epoch(), out[i]);
        return out;
    }

    /** The scheduled batch of {@code rank} for the global step starting at {@code c}. */
    public ScheduledBatch scheduled(ScheduleCursor c, int rank) {
        return new ScheduledBatch(c, c.position() / positionsPerStep, globalStep(c), rank, batchAt(c, rank), resumeAfter(c));
    }

    /** The state that resumes the job right after the step at {@code c}: the next step's cursor and label, and each source's cursor there. */
    public Resume resumeAfter(ScheduleCursor c) {
        var next = next(c);
        return resumeAt(next);
    }

    /** The state of a job about to take the step at {@code c}. */
    public Resume resumeAt(ScheduleCursor c) {
        return resumeAt(c, globalStep(c));
    }

    /**
     * The state of a job about to take the step at {@code c}, labelled {@code step}: for a packed job, whose steps take
     * a variable number of positions, so that the label is not this schedule's position arithmetic
     * ({@link dev.stoker.plan.pack.PackedSchedule}).
     */
    public Resume resumeAt(ScheduleCursor c, long step) {
        return resume(c, step, mix == null || mix.sources() > BatchLayout.MAX_RESUME_SOURCES ? null : sourceDraws(c));
    }

    /** The resume state at {@code c} labelled {@code step}, from each source's draws before {@code c} (null: not carried). */
    private Resume resume(ScheduleCursor c, long step, long[] draws) {
        if (mix == null) return new Resume(c.epoch(), c.position(), step, new long[] {c.epoch()}, new long[] {c.position()});
        if (draws == null) return new Resume(c.epoch(), c.position(), step, new long[0], new long[0]);
        int n = mix.sources();
        var epochs = new long[n];
        var positions = new long[n];
        for (int i = 0; i < n; i++) {
            epochs[i] = draws[i] / mix.size(i);
            positions[i] = draws[i] % mix.size(i);
        }
        return new Resume(c.epoch(), c.position(), step, epochs, positions);
    }

    private static final int CHECKPOINT = 4096;
    private final Object countLock = new Object();
    private final long[] countedEpochs = {-1, -1}; // two epochs, as the permutations: ranks straddle an epoch's end
    private final int[][][] countCheckpoints = new int[2][][]; // [position / CHECKPOINT][source]: places before it
    private int countVictim;

    /** Draws of each source before cursor {@code c}: its places in the epochs before, and those before {@code c} in its epoch. */
    long[] sourceDraws(ScheduleCursor c) {
        int n = mix.sources();
        int[] perm = permutation(c.epoch());
        int[][] checkpoints = null;
        synchronized (countLock) {
            for (int i = 0; i < 2; i++) if (countedEpochs[i] == c.epoch()) checkpoints = countCheckpoints[i];
        }
        if (checkpoints == null) {
            checkpoints = new int[datasetSize / CHECKPOINT + 1][];
            var running = new int[n];
            for (int p = 0; p < datasetSize; p++) {
                if (p % CHECKPOINT == 0) checkpoints[p / CHECKPOINT] = running.clone();
                running[mix.sourceOfPlace(perm[p])]++;
            }
            synchronized (countLock) {
                int slot = countVictim;
                countVictim ^= 1;
                countedEpochs[slot] = c.epoch();
                countCheckpoints[slot] = checkpoints;
            }
        }
        int pos = (int) c.position();
        var draws = new long[n];
        var base = checkpoints[pos / CHECKPOINT];
        for (int i = 0; i < n; i++) draws[i] = c.epoch() * mix.placesOf(i) + base[i];
        for (int p = pos / CHECKPOINT * CHECKPOINT; p < pos; p++) draws[mix.sourceOfPlace(perm[p])]++;
        return draws;
    }

    /**
     * Rank {@code rank}'s batches from {@code start} on, endlessly (epoch after epoch). Each batch's resume state is
     * counted on from the one before (the sources' draws over the step's positions), not from its epoch's start.
     */
    @Override
    public Iterator<ScheduledBatch> iterator(ScheduleCursor start, int rank) {
        requireFits(start);
        if (rank < 0 || rank >= ranks) throw new IllegalArgumentException("rank " + rank + " outside [0, " + ranks + ")");
        boolean carried = mix != null && mix.sources() <= BatchLayout.MAX_RESUME_SOURCES;
        return new Iterator<>() {
            private ScheduleCursor cursor = start;
            private long[] draws = carried ? sourceDraws(start) : null; // each source's draws before the cursor

            @Override
            public boolean hasNext() { return true; }

            @Override
            public ScheduledBatch next() {
                var c = cursor;
                var n = SampleSchedule.this.next(c);
                long[] after = draws == null ? null : drawsAfter(c, n, draws);
                var b = new ScheduledBatch(c, c.position() / positionsPerStep, globalStep(c), rank, batchAt(c, rank),
                        resume(n, globalStep(n), after));
                cursor = n;
                draws = after;
                return b;
            }
        };
    }

    /** Each source's draws before {@code next}, the cursor after the step at {@code c}, from its draws before {@code c}. */
    private long[] drawsAfter(ScheduleCursor c, ScheduleCursor next, long[] draws) {
        var out = new long[draws.length];
        if (next.epoch() != c.epoch()) { // the next epoch's start: every place of the epochs before it
            for (int i = 0; i < out.length; i++) out[i] = next.epoch() * mix.placesOf(i);
            return out;
        }
        System.arraycopy(draws, 0, out, 0, out.length);
        int[] perm = permutation(c.epoch());
        for (long p = c.position(); p < next.position(); p++) out[mix.sourceOfPlace(perm[(int) p])]++;
        return out;
    }

    /** Rank {@code rank}'s batch of the step at {@code at}, labelled {@code label} (below 0: counted from the origin). */
    @Override
    public ScheduledBatch step(ScheduleCursor at, long label, int rank) { return labelled(at, label).scheduled(at, rank); }

    /** Steps between the two cursors by position arithmetic, as steps from the origin count them. */
    @Override
    public long stepsBetween(ScheduleCursor from, ScheduleCursor to, long max) {
        long n = naturalStep(to) - naturalStep(from);
        return Math.max(0, Math.min(n, max));
    }

    /** Steps from the origin to {@code c}, whatever the labels. */
    private long naturalStep(ScheduleCursor c) { return c.epoch() * stepsPerEpoch() + c.position() / positionsPerStep; }

    /** A batch leaves nothing out: each position of its step is one of its samples. */
    @Override
    public List<LeftOut> leftOut(ScheduledBatch b) {
        if (b.pack() != null)
            throw new IllegalArgumentException("rank " + b.rank() + "'s batch of epoch " + b.epoch() + " step " + b.step()
                    + " is a packed step (a PackedSchedule's), not one of this batch schedule's");
        return List.of();
    }

    @Override
    public String name() { return "the schedule"; }

    @Override
    public String unit() { return "batch"; }

    /** Per sample of the batch: {@code {"step", "rank", "source", "sample"}}. */
    @Override
    public List<Map<String, Object>> describe(ScheduledBatch b) {
        var out = new ArrayList<Map<String, Object>>(b.size());
        for (int record : b.indices()) {
            int source = mix == null ? 0 : mix.sourceOfRecord(record);
            var line = new LinkedHashMap<String, Object>();
            line.put("step", b.globalStep());
            line.put("rank", b.rank());
            line.put("source", source);
            line.put("sample", mix == null ? record : record - mix.base(source));
            out.add(line);
        }
        return out;
    }

    @Override
    public List<Map<String, Object>> describeStep(ScheduledBatch b) { return List.of(); }

    /** The permutation of epoch {@code epoch}; the returned array is shared, never modify it. */
    int[] permutation(long epoch) {
        if (epoch < 0) throw new IllegalArgumentException("epoch must be >= 0, got " + epoch);
        synchronized (cacheLock) {
            for (int i = 0; i < 2; i++) if (cachedEpochs[i] == epoch) return cachedPermutations[i];
        }
        int[] perm = shuffle(seed, epoch, datasetSize);
        synchronized (cacheLock) {
            int slot = cacheVictim;
            cacheVictim ^= 1;
            cachedEpochs[slot] = epoch;
            cachedPermutations[slot] = perm;
        }
        return perm;
    }

    /** The record (numbered across sources) at {@code position} of epoch {@code epoch}'s order. */
    public int recordAt(long epoch, int position) {
        if (position < 0 || position >= datasetSize)
            throw new IllegalArgumentException("position " + position + " outside [0, " + datasetSize + ")");
        int place = permutation(epoch)[position];
        return mix == null ? place : mix.record(epoch, place);
    }

    /**
     * The records at positions {@code [from, from + count)} of epoch {@code epoch}'s order, written to
     * {@code out[0 .. count)}: {@link #recordAt} for a run of positions, with one look-up of the permutation.
     */
    public void recordsAt(long epoch, int from, int count, int[] out) {
        if (from < 0 || count < 0 || from + count > datasetSize || count > out.length)
            throw new IllegalArgumentException("positions [" + from + ", " + ((long) from + count) + ") outside [0, " + datasetSize
                    + ") or more than the " + out.length + " places given");
        int[] perm = permutation(epoch);
        if (mix == null) System.arraycopy(perm, from, out, 0, count);
        else for (int i = 0; i < count; i++) out[i] = mix.record(epoch, perm[from + i]);
    }

    /** A copy of epoch {@code epoch}'s permutation. */
    public int[] permutationCopy(long epoch) { return permutation(epoch).clone(); }

    private void requireFits(ScheduleCursor c) {
        if (c.position() + positionsPerStep > datasetSize)
            throw new IllegalArgumentException("cursor " + c + " leaves less than one global step (" + positionsPerStep
                    + " samples) in an epoch of " + datasetSize);
    }

    static int[] shuffle(long seed, long epoch, int n) {
        int[] perm = new int[n];
        for (int i = 0; i < n; i++) perm[i] = i;
        var rnd = new SplitMix64(mix64(mix64(seed) + GOLDEN_GAMMA * (epoch + 1)));
        for (int i = n - 1; i > 0; i--) {
            int j = rnd.nextInt(i + 1);
            int t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        return perm;
    }

    static long mix64(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** SplitMix64 (Steele, Lea, Flood 2014) with java.util.Random's unbiased bounded draw. */
    private static final class SplitMix64 {
        private long state;

        SplitMix64(long seed) { this.state = seed; }

        long nextLong() { return mix64(state += GOLDEN_GAMMA); }

        int nextInt(int bound) {
            int r = (int) (nextLong() >>> 33);
            int m = bound - 1;
            if ((bound & m) == 0) return (int) ((bound * (long) r) >> 31);
            for (int u = r; u - (r = u % bound) + m < 0; u = (int) (nextLong() >>> 33)) { }
            return r;
        }
    }
}
