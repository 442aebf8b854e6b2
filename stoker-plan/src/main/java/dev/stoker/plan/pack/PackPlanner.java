package dev.stoker.plan.pack;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.plan.schedule.SampleSchedule;
import java.util.Arrays;

/**
 * Plans a packed job's global steps: from a cursor in the global sample order, it takes the next samples and forms one
 * pack per rank — a row of whole samples of at most N tokens and P vision patches — choosing which sample goes to
 * which rank so that the ranks' predicted step costs ({@link PackCost}) are even ({@link Balance#COST}) or only their
 * sample counts are ({@link Balance#COUNT}). A step consumes a variable number of positions; {@link PackedStep#next()}
 * is where the next one starts.
 *
 * <p>Design. <b>The window</b>: the positions from the cursor, in order. A record the shape index marks ERROR or
 * FILTERED goes to {@code skipped}; one over a budget alone goes to {@code filtered} (tokens &gt; N, patches &gt; P, or,
 * text only, tokens + the dummy image's tokens &gt; N: such a sample could not sit beside the dummy image its pack
 * gets in a step with images); both consume their position. Every other record joins the window while the window's
 * tokens, plus a dummy image for each rank that may lack an image ({@code max(0, R − samples with an image)} when the
 * window holds an image), fit {@code R·N} (and its patches {@code R·P}); the first that does not fit ends the window
 * and stays for the next step. The window always takes at least R samples, so that every rank gets one.
 *
 * <p><b>COST</b> (longest processing time first, Graham 1969): the window sorted by predicted cost descending, ties
 * by position ascending; each sample goes to the rank with the least cost so far among the ranks whose pack it fits
 * (tokens, patches, and the dummy image's where the pack would have no image in a step that has one), ties by fewer
 * samples, then by lower rank number. When a sample fits no pack, the window's last sample (by position) is given back
 * to the next step and the assignment is redone; after {@value #MAX_RETRIES} such retries the window is cut to R
 * samples, which always fit (each sample fits an empty pack alone, and the tie-break puts the first R on R distinct
 * ranks). Then a refinement ({@code refine}): moves and swaps between the costliest pack and the others, within the
 * budgets, while they lower the costliest — LPT alone leaves the packs of cheap text tokens short of the mean cost
 * when the token budget stops them. <b>COUNT</b>: the window cut to a multiple of R, sorted by tokens descending (ties by position ascending) and
 * dealt snake-wise (ranks 0 … R−1, then R−1 … 0, …), so each rank gets the same number of samples and the packs' tokens
 * come out close; while a pack exceeds a budget, the window's last R samples are given back.
 *
 * <p>Within a pack, segments are in ascending global position. Everything above is a pure function of the order
 * (seed, epoch permutation, mix), the shapes, the budgets and the cursor: two planners give the same steps, a job
 * resumed from any step's {@code next} continues with the steps it would have had, and one resumed with another rank
 * count covers the rest of the order exactly once (its steps are planned from the same cursor). Costs are doubles
 * computed the same way every time (Java's floating point is strict), so ties are exact and break the same way.
 *
 * <p><b>Dummy image</b>: when a pack of the step holds an image or a video (a sample that runs the vision tower,
 * {@link SampleShape#hasVision}), every pack without one gets {@code dummyImage} (its tokens, patches and cost counted
 * in the pack's); a pack whose only vision input is a video needs none, since the video runs the vision tower.
 * <b>Video</b>: a video's {@code t·h·w} rows count in the sample's patches ({@code --pack-patches}) and its vision
 * cost in the sample's ({@link PackCost#videoFlops}). <b>Epoch end</b>: the global order is epoch after epoch, and a
 * window that reaches the end of epoch e goes on with epoch e+1's permutation from its position 0, so a step can run
 * across an epoch's end (at most one: the walk stops at the end of e+1) and nothing is dropped there — every position
 * of every epoch is in exactly one pack, filtered or skipped. A record of e+1 that the window already holds from e (the
 * same record, shuffled back to the head of the next epoch) ends the window before it: the step is a little shorter
 * and that record starts the next step, so no record is twice in one step across an epoch end. The one exception:
 * while the window holds fewer than R samples it must go on (every rank needs one), so a repeat met then joins it —
 * that needs an epoch's tail of fewer than R samples, from a step's cursor or one saved with another rank count,
 * and one of them again among the next epoch's first few (a probability of about k·(R − k)/D for k left of D).
 * (A mix of sources that repeats a record within one epoch, a weight above 1, may hold it twice in a step, as it
 * always could.) A cursor is valid anywhere in its epoch; one at or past the epoch's end is {@linkplain #aligned
 * aligned} to the next epoch's start.
 *
 * <p>Speed: no boxing and no allocation in the loops beyond the step's own arrays: the window lives in scratch arrays
 * reused from step to step, sorted by a stable merge sort on primitive indices; the assignment is O(window · R).
 *
 * <p>Threading: {@link #plan} is synchronized (it shares the scratch arrays); the planner is otherwise immutable and safe
 * to share.
 */
public final class PackPlanner {
    /** How the planner shares a step's samples between the ranks. */
    public enum Balance {
        /** Even predicted cost per rank (LPT within the budgets). */
        COST,
        /** Even sample count per rank (snake-dealt by tokens within the budgets). */
        COUNT
    }

    /** Failed assignments redone with one sample fewer before the window is cut to one sample per rank. */
    static final int MAX_RETRIES = 64;
    /** Most samples one step's window takes. */
    static final int MAX_WINDOW = 1 << 20;
    private static final int CHUNK = 512;
    /** Refinement stops when the costliest pack is within this fraction of the mean. */
    static final double REFINE_TOLERANCE = 0.002;
    /** Refinement rounds per rank, at most. */
    static final int REFINE_ROUNDS = 8;

    private final SampleSchedule order;
    private final ShapeIndex shapes;
    private final int ranks;
    private final int tokenBudget;
    private final int patchBudget;
    private final Balance balance;
    private final PackCost cost;
    private final SampleShape dummy;
    private final int dummyTokens;
    private final int dummyPatches;
    private final double dummyCost;
    private final int epochSize;

    // Scratch, guarded by this. Window sample i (in position order): its record, position, tokens, patches, cost, image.
    // Positions are counted from the start of the step's epoch e: epoch e+1's position p is epochSize + p.
    private int[] wRecord = new int[256], wTokens = new int[256], wPatches = new int[256];
    private long[] wPos = new long[256];
    private double[] wCost = new double[256], wKey = new double[256];
    private boolean[] wImage = new boolean[256];
    private int[] wRank = new int[256], sorted = new int[256], sortTmp = new int[256];
    private int[] fRecord = new int[16], sRecord = new int[16];
    private long[] fPos = new long[16], sPos = new long[16];
    private int nf, ns;
    // The records the window took from epoch e, as an open-addressing set (−1: empty), built when it reaches e+1.
    private int[] tail = new int[64];
    // Records of the shape index that fit the budgets (OK, not over a budget alone); −1 until counted.
    private long fitting = -1;
    private final double[] rCost;
    private final int[] rTokens, rPatches, rCount;
    private final int[] rImages; // samples with an image per rank
    private final int[] chunk = new int[CHUNK];
    private long chunkEpoch = -1;
    private int chunkFrom, chunkLen;

    /**
     * @param order       the global sample order (its ranks and batch size play no part: only its epochs' permutations
     *                    and source mix)
     * @param shapes      every record's shape
     * @param ranks       packs per step
     * @param tokenBudget N: most tokens per pack (the dummy image's included)
     * @param patchBudget P: most vision patches per pack, or 0 for no limit
     * @param balance     how samples are shared between ranks
     * @param cost        the cost model
     * @param dummy       the dummy image's segment: its tokens and its one image's patches
     */
    public PackPlanner(SampleSchedule order, ShapeIndex shapes, int ranks, int tokenBudget, int patchBudget, Balance balance,
                       PackCost cost, SampleShape dummy) {
        if (ranks <= 0) throw new IllegalArgumentException("ranks must be positive, got " + ranks);
        if (tokenBudget <= 0) throw new IllegalArgumentException("--pack-tokens must be positive, got " + tokenBudget);
        if (patchBudget < 0) throw new IllegalArgumentException("--pack-patches must be >= 0 (0: no limit), got " + patchBudget);
        if (dummy == null || dummy.kind() != SampleShape.Kind.OK || dummy.images() != 1)
            throw new IllegalArgumentException("the dummy image's shape must be one OK segment of one image, got " + dummy);
        if (dummy.tokens() >= tokenBudget)
            throw new IllegalArgumentException("--pack-tokens " + tokenBudget + " leaves no room beside the dummy image's " + dummy.tokens() + " tokens");
        if (patchBudget > 0 && dummy.patches() > patchBudget)
            throw new IllegalArgumentException("--pack-patches " + patchBudget + " is smaller than the dummy image's " + dummy.patches() + " patches");
        if ((long) ranks * tokenBudget > Integer.MAX_VALUE || (long) ranks * patchBudget > Integer.MAX_VALUE)
            throw new IllegalArgumentException("ranks × budget overflows: " + ranks + " × " + Math.max(tokenBudget, patchBudget));
        this.order = java.util.Objects.requireNonNull(order, "order");
        this.shapes = java.util.Objects.requireNonNull(shapes, "shapes");
        this.ranks = ranks;
        this.tokenBudget = tokenBudget;
        this.patchBudget = patchBudget;
        this.balance = java.util.Objects.requireNonNull(balance, "balance");
        this.cost = java.util.Objects.requireNonNull(cost, "cost");
        this.dummy = dummy;
        this.dummyTokens = dummy.tokens();
        this.dummyPatches = dummy.patches();
        this.dummyCost = cost.flops(dummy);
        this.epochSize = order.datasetSize();
        this.rCost = new double[ranks];
        this.rTokens = new int[ranks];
        this.rPatches = new int[ranks];
        this.rCount = new int[ranks];
        this.rImages = new int[ranks];
    }

    /** The same planning for {@code newRanks} ranks: where a job resized to another rank count continues. */
    public PackPlanner withRanks(int newRanks) {
        return new PackPlanner(order, shapes, newRanks, tokenBudget, patchBudget, balance, cost, dummy);
    }

    public SampleSchedule order() { return order; }

    public ShapeIndex shapes() { return shapes; }

    public int ranks() { return ranks; }

    public int tokenBudget() { return tokenBudget; }

    /** P, or 0 for no patch limit. */
    public int patchBudget() { return patchBudget; }

    public Balance balance() { return balance; }

    public PackCost cost() { return cost; }

    public SampleShape dummy() { return dummy; }

    /** Positions of each epoch (the order's data set size). */
    public int epochSize() { return epochSize; }

    /**
     * The step starting at {@code c} (or at {@link #aligned aligned(c)}, when {@code c} is at or past its epoch's end),
     * labelled {@code label}.
     *
     * @throws IllegalStateException when the shape index holds fewer than R samples that fit the budgets, or when the
     *                               rest of the cursor's epoch and the whole next one do (a mix whose epochs differ)
     */
    public synchronized PackedStep plan(ScheduleCursor c, long label) {
        ScheduleCursor start = aligned(c);
        requireFitting();
        long epoch = start.epoch();
        long from = start.position();
        long limit = 2L * epochSize; // the end of epoch e+1: a step crosses one epoch end at most
        int n = 0;
        nf = 0;
        ns = 0;
        long windowTokens = 0, windowPatches = 0;
        int imageSamples = 0;
        long tokenRoom = (long) ranks * tokenBudget, patchRoom = (long) ranks * patchBudget;
        long pos = from;
        for (; pos < limit; pos++) {
            boolean next = pos >= epochSize;
            long e = next ? epoch + 1 : epoch;
            int p = (int) (next ? pos - epochSize : pos);
            if (pos == epochSize) collectTail(n);
            int record = record(e, p);
            SampleShape s = shape(record, e, p);
            if (next && n >= ranks && inTail(record)) break; // already in the window (from epoch e): starts the next step
            if (s.kind() != SampleShape.Kind.OK) {
                addSkipped(record, pos);
                continue;
            }
            int tokens = s.tokens(), patches = s.patches();
            boolean image = s.hasVision(); // an image or a video: the sample runs the vision tower
            if (overBudget(tokens, patches, image)) {
                addFiltered(record, pos);
                continue;
            }
            if (n >= ranks) {
                int images = imageSamples + (image ? 1 : 0);
                int lacking = images > 0 ? Math.max(0, ranks - images) : 0;
                if (windowTokens + tokens + (long) lacking * dummyTokens > tokenRoom) break;
                if (patchBudget > 0 && windowPatches + patches + (long) lacking * dummyPatches > patchRoom) break;
                if (n >= MAX_WINDOW) break;
            }
            if (n == wRecord.length) growWindow();
            wRecord[n] = record;
            wPos[n] = pos;
            wTokens[n] = tokens;
            wPatches[n] = patches;
            wImage[n] = image;
            wCost[n] = cost.flops(s);
            windowTokens += tokens;
            windowPatches += patches;
            if (image) imageSamples++;
            n++;
        }
        if (n < ranks)
            throw new IllegalStateException("from " + start + " to the end of epoch " + (epoch + 1) + " the order holds " + n
                    + " samples within the budgets (--pack-tokens " + tokenBudget + ", --pack-patches " + patchBudget + "), fewer than "
                    + ranks + ": no packed step can give every rank a sample");
        int kept = balance == Balance.COST ? assignByCost(n) : assignByCount(n);
        long end = kept == n ? pos : wPos[kept];
        return build(start, epoch, end, kept, label);
    }

    /**
     * {@code c} itself when it is inside its epoch, else the next epoch's start: a step may start anywhere in an epoch
     * (steps run across epoch ends, so no rest is dropped); a position at or past the epoch's end (the end itself, as
     * another schedule may write the cursor after an epoch's last step) continues with the next epoch.
     */
    public ScheduleCursor aligned(ScheduleCursor c) {
        return c.position() < epochSize ? c : new ScheduleCursor(c.epoch() + 1, 0);
    }

    /** Counts, once, the records of the shape index within the budgets; fewer than R: no step can ever be planned. */
    private void requireFitting() {
        if (fitting < 0) {
            long n = 0;
            for (int i = 0, size = shapes.size(); i < size; i++) {
                SampleShape s = shapes.shape(i);
                if (s != null && s.kind() == SampleShape.Kind.OK && !overBudget(s.tokens(), s.patches(), s.hasVision())) n++;
            }
            fitting = n;
        }
        if (fitting < ranks)
            throw new IllegalStateException("the data set holds " + fitting + " samples within the budgets (--pack-tokens " + tokenBudget
                    + ", --pack-patches " + patchBudget + "), fewer than " + ranks + " samples: no packed step can give every rank a sample"
                    + " without repeating one");
    }

    /** The window's records from epoch e (its first {@code n} samples, its filtered and skipped ones), into {@link #tail}. */
    private void collectTail(int n) {
        int want = Integer.highestOneBit(Math.max(16, (n + nf + ns) * 2)) << 1; // load at most 1/2
        if (tail.length != want && (tail.length < want || tail.length > 4 * want)) tail = new int[want];
        Arrays.fill(tail, -1);
        for (int i = 0; i < n; i++) addTail(wRecord[i]);
        for (int i = 0; i < nf; i++) addTail(fRecord[i]);
        for (int i = 0; i < ns; i++) addTail(sRecord[i]);
    }

    private void addTail(int record) {
        int mask = tail.length - 1;
        for (int h = mixHash(record) & mask; ; h = (h + 1) & mask) {
            if (tail[h] == record) return;
            if (tail[h] < 0) {
                tail[h] = record;
                return;
            }
        }
    }

    private boolean inTail(int record) {
        int mask = tail.length - 1;
        for (int h = mixHash(record) & mask; ; h = (h + 1) & mask) {
            if (tail[h] == record) return true;
            if (tail[h] < 0) return false;
        }
    }

    private static int mixHash(int x) {
        int h = x * 0x9E3779B9;
        return h ^ (h >>> 16);
    }

    private boolean overBudget(int tokens, int patches, boolean image) {
        if (tokens > tokenBudget) return true;
        if (patchBudget > 0 && patches > patchBudget) return true;
        return !image && (long) tokens + dummyTokens > tokenBudget;
    }

    /** COST: LPT over the window; returns how many of its samples (the first by position) were placed. */
    private int assignByCost(int n) {
        for (int i = 0; i < n; i++) {
            sorted[i] = i;
            wKey[i] = wCost[i];
        }
        sortDescending(n);
        int kept = n;
        for (int retry = 0; ; retry++) {
            if (tryLpt(n, kept)) return kept;
            kept = retry + 1 >= MAX_RETRIES ? ranks : kept - 1;
        }
    }

    private boolean tryLpt(int n, int kept) {
        boolean stepImage = false;
        for (int i = 0; i < kept && !stepImage; i++) stepImage = wImage[i];
        clearRanks();
        for (int k = 0; k < n; k++) {
            int i = sorted[k];
            if (i >= kept) continue;
            int best = -1;
            for (int r = 0; r < ranks; r++) {
                if (!fits(r, i, stepImage)) continue;
                if (best < 0 || rCost[r] < rCost[best] || (rCost[r] == rCost[best] && rCount[r] < rCount[best])) best = r;
            }
            if (best < 0) return false;
            place(best, i);
        }
        refine(kept, stepImage);
        return true;
    }

    /**
     * Moves and swaps that lower the costliest pack (after LPT). The token budget binds LPT's last choices: a pack of
     * cheap text tokens fills its N before it reaches the mean cost, and one of costly image tokens reaches the mean
     * with room left. Each round takes the costliest rank A (lowest number among equals) and, over every other rank B,
     * the move of one of A's samples to B, or the swap of one of A's with one of B's, that fits both packs' budgets and
     * leaves {@code max(cost A, cost B)} lowest (ties: the first found, in rank, then position order); it stops when
     * no move lowers A, when A is within {@value #REFINE_TOLERANCE} of the mean, or after {@value #REFINE_ROUNDS}
     * rounds per rank.
     */
    private void refine(int kept, boolean stepImage) {
        double total = 0;
        for (int r = 0; r < ranks; r++) total += rCost[r];
        double mean = total / ranks;
        if (!(mean > 0)) return;
        for (int round = 0, rounds = REFINE_ROUNDS * ranks; round < rounds; round++) {
            int a = 0;
            for (int r = 1; r < ranks; r++) if (rCost[r] > rCost[a]) a = r;
            if (rCost[a] <= mean * (1 + REFINE_TOLERANCE)) return;
            int na = 0;
            for (int i = 0; i < kept; i++) if (wRank[i] == a) sortTmp[na++] = i; // A's samples, in position order
            double bestMax = rCost[a];
            int bestB = -1, bestI = -1, bestJ = -1;
            for (int b = 0; b < ranks; b++) {
                if (b == a) continue;
                double gap = rCost[a] - rCost[b];
                if (gap <= 0) continue;
                for (int x = 0; x < na; x++) { // a move of sample i from A to B
                    int i = sortTmp[x];
                    double d = wCost[i];
                    if (d >= gap) continue;
                    double m = Math.max(rCost[a] - d, rCost[b] + d);
                    if (m < bestMax && swapFits(a, b, i, -1, stepImage)) {
                        bestMax = m;
                        bestB = b;
                        bestI = i;
                        bestJ = -1;
                    }
                }
                for (int j = 0; j < kept; j++) { // a swap of i (A) with j (B)
                    if (wRank[j] != b) continue;
                    for (int x = 0; x < na; x++) {
                        int i = sortTmp[x];
                        double d = wCost[i] - wCost[j];
                        if (d <= 0 || d >= gap) continue;
                        double m = Math.max(rCost[a] - d, rCost[b] + d);
                        if (m < bestMax && swapFits(a, b, i, j, stepImage)) {
                            bestMax = m;
                            bestB = b;
                            bestI = i;
                            bestJ = j;
                        }
                    }
                }
            }
            if (bestB < 0) return;
            unplace(a, bestI);
            place(bestB, bestI);
            if (bestJ >= 0) {
                unplace(bestB, bestJ);
                place(a, bestJ);
            }
        }
    }

    /** Whether moving sample {@code i} from pack {@code a} to {@code b}, and {@code j} (unless −1) from {@code b} to {@code a}, keeps both within budget. */
    private boolean swapFits(int a, int b, int i, int j, boolean stepImage) {
        int ti = wTokens[i], pi = wPatches[i], ii = wImage[i] ? 1 : 0;
        int tj = j < 0 ? 0 : wTokens[j], pj = j < 0 ? 0 : wPatches[j], ij = j >= 0 && wImage[j] ? 1 : 0;
        long ta = (long) rTokens[a] - ti + tj, pa = (long) rPatches[a] - pi + pj;
        long tb = (long) rTokens[b] + ti - tj, pb = (long) rPatches[b] + pi - pj;
        if (stepImage && rImages[a] - ii + ij == 0) {
            ta += dummyTokens;
            pa += dummyPatches;
        }
        if (stepImage && rImages[b] + ii - ij == 0) {
            tb += dummyTokens;
            pb += dummyPatches;
        }
        if (ta > tokenBudget || tb > tokenBudget) return false;
        return patchBudget == 0 || (pa <= patchBudget && pb <= patchBudget);
    }

    /** COUNT: snake-dealt by tokens; returns the samples placed (a multiple of R). */
    private int assignByCount(int n) {
        for (int i = 0; i < n; i++) {
            sorted[i] = i;
            wKey[i] = wTokens[i];
        }
        sortDescending(n);
        int kept = n - n % ranks;
        for (int retry = 0; ; retry++) {
            if (tryDeal(n, kept)) return kept;
            kept = retry + 1 >= MAX_RETRIES ? ranks : kept - ranks;
        }
    }

    private boolean tryDeal(int n, int kept) {
        boolean stepImage = false;
        for (int i = 0; i < kept && !stepImage; i++) stepImage = wImage[i];
        clearRanks();
        int k = 0;
        for (int j = 0; j < n; j++) {
            int i = sorted[j];
            if (i >= kept) continue;
            int round = k / ranks, slot = k % ranks;
            place((round & 1) == 0 ? slot : ranks - 1 - slot, i);
            k++;
        }
        for (int r = 0; r < ranks; r++) {
            long t = rTokens[r], p = rPatches[r];
            if (stepImage && rImages[r] == 0) {
                t += dummyTokens;
                p += dummyPatches;
            }
            if (t > tokenBudget || (patchBudget > 0 && p > patchBudget)) return false;
        }
        return true;
    }

    private boolean fits(int r, int i, boolean stepImage) {
        long t = (long) rTokens[r] + wTokens[i], p = (long) rPatches[r] + wPatches[i];
        if (stepImage && rImages[r] == 0 && !wImage[i]) {
            t += dummyTokens;
            p += dummyPatches;
        }
        return t <= tokenBudget && (patchBudget == 0 || p <= patchBudget);
    }

    private void clearRanks() {
        Arrays.fill(rCost, 0);
        Arrays.fill(rTokens, 0);
        Arrays.fill(rPatches, 0);
        Arrays.fill(rCount, 0);
        Arrays.fill(rImages, 0);
    }

    private void unplace(int r, int i) {
        rCost[r] -= wCost[i];
        rTokens[r] -= wTokens[i];
        rPatches[r] -= wPatches[i];
        rCount[r]--;
        if (wImage[i]) rImages[r]--;
    }

    private void place(int r, int i) {
        wRank[i] = r;
        rCost[r] += wCost[i];
        rTokens[r] += wTokens[i];
        rPatches[r] += wPatches[i];
        rCount[r]++;
        if (wImage[i]) rImages[r]++;
    }

    private PackedStep build(ScheduleCursor start, long epoch, long end, int kept, long label) {
        boolean stepImage = false;
        for (int r = 0; r < ranks; r++) stepImage |= rImages[r] > 0;
        int[][] records = new int[ranks][];
        for (int r = 0; r < ranks; r++) records[r] = new int[rCount[r]];
        int[] fill = new int[ranks];
        double[] costs = new double[ranks]; // summed afresh in position order: refinement's running sums may have drifted
        for (int i = 0; i < kept; i++) { // position order: segments ascend
            int r = wRank[i];
            records[r][fill[r]++] = wRecord[i];
            costs[r] += wCost[i];
        }
        int[] tokens = rTokens.clone(), patches = rPatches.clone();
        boolean[] dummyImage = new boolean[ranks];
        for (int r = 0; r < ranks; r++) {
            if (stepImage && rImages[r] == 0) {
                dummyImage[r] = true;
                costs[r] += dummyCost;
                tokens[r] += dummyTokens;
                patches[r] += dummyPatches;
            }
        }
        int[] filtered = below(fRecord, fPos, nf, end), skipped = below(sRecord, sPos, ns, end);
        ScheduleCursor next = end < epochSize ? new ScheduleCursor(epoch, end)
                : end < 2L * epochSize ? new ScheduleCursor(epoch + 1, end - epochSize) : new ScheduleCursor(epoch + 2, 0);
        return new PackedStep(start, next, label, records, costs, tokens, patches, dummyImage, filtered, skipped);
    }

    private static int[] below(int[] records, long[] positions, int count, long end) {
        int n = 0;
        while (n < count && positions[n] < end) n++;
        return Arrays.copyOf(records, n);
    }

    /** Stable merge sort of {@code sorted[0, n)} by {@code wKey} descending (equal keys keep position order). */
    private void sortDescending(int n) {
        int[] a = sorted, b = sortTmp;
        for (int width = 1; width < n; width <<= 1) {
            for (int lo = 0; lo < n; lo += width << 1) {
                int mid = Math.min(lo + width, n), hi = Math.min(lo + (width << 1), n);
                int i = lo, j = mid, k = lo;
                while (i < mid && j < hi) b[k++] = wKey[a[j]] > wKey[a[i]] ? a[j++] : a[i++];
                while (i < mid) b[k++] = a[i++];
                while (j < hi) b[k++] = a[j++];
            }
            int[] t = a;
            a = b;
            b = t;
        }
        if (a != sorted) System.arraycopy(a, 0, sorted, 0, n);
    }

    private int record(long epoch, int pos) {
        if (epoch != chunkEpoch || pos < chunkFrom || pos >= chunkFrom + chunkLen) {
            chunkLen = Math.min(CHUNK, epochSize - pos);
            order.recordsAt(epoch, pos, chunkLen, chunk);
            chunkEpoch = epoch;
            chunkFrom = pos;
        }
        return chunk[pos - chunkFrom];
    }

    private SampleShape shape(int record, long epoch, int pos) {
        if (record < 0 || record >= shapes.size())
            throw new IllegalStateException("record " + record + " (epoch " + epoch + " position " + pos + ") is outside the shape index of "
                    + shapes.size() + " records: the index does not belong to this data set");
        SampleShape s = shapes.shape(record);
        if (s == null) throw new IllegalStateException("the shape index has no shape for record " + record);
        return s;
    }

    private void addSkipped(int record, long pos) {
        if (ns == sRecord.length) {
            sRecord = Arrays.copyOf(sRecord, ns * 2);
            sPos = Arrays.copyOf(sPos, ns * 2);
        }
        sRecord[ns] = record;
        sPos[ns++] = pos;
    }

    private void addFiltered(int record, long pos) {
        if (nf == fRecord.length) {
            fRecord = Arrays.copyOf(fRecord, nf * 2);
            fPos = Arrays.copyOf(fPos, nf * 2);
        }
        fRecord[nf] = record;
        fPos[nf++] = pos;
    }

    private void growWindow() {
        int n = wRecord.length * 2;
        wRecord = Arrays.copyOf(wRecord, n);
        wPos = Arrays.copyOf(wPos, n);
        wTokens = Arrays.copyOf(wTokens, n);
        wPatches = Arrays.copyOf(wPatches, n);
        wCost = Arrays.copyOf(wCost, n);
        wKey = Arrays.copyOf(wKey, n);
        wImage = Arrays.copyOf(wImage, n);
        wRank = Arrays.copyOf(wRank, n);
        sorted = Arrays.copyOf(sorted, n);
        sortTmp = Arrays.copyOf(sortTmp, n);
    }
}
