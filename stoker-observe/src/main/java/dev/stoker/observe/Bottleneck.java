package dev.stoker.observe;

import dev.stoker.plan.pack.PackPlanner;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.OptionalDouble;

/**
 * Names what limits a feed, from its sampled timeline and stage latencies: the talk's method
 * (measure the wait, classify the bottleneck, fix that one, measure again) without a profiler.
 *
 * <p>Design. The prefetch buffers sit between the pipeline and the trainers, so their occupancy
 * says on which side the limit is: full buffers mean the pipeline is ahead of the trainers, empty
 * buffers mean the trainers are ahead of the pipeline. Which pipeline stage holds it back is then
 * read from the utilisation of its two shared resources, the fetch slots and the CPU pool.
 * Figures are taken over the steady part of the run: ticks after the first batch was delivered
 * (all ticks if none was). With R ranks, "full" and "empty" fractions are averaged over the ranks.
 * The rules, first match wins:
 * <ol>
 *   <li><b>STRAGGLER_BOUND</b> ({@code balance}): a packed job ({@code --pack-tokens}) whose ranks lose more to
 *       imbalance than to waiting for data. The loss to imbalance of a step is {@code 1 − mean / max} of the ranks'
 *       predicted pack costs (the share of the step the average rank waits at the all-reduce for the slowest, as
 *       predicted), averaged over the recent packed steps ({@link PackStats}' window); straggler-bound when that loss is
 *       ≥ 0.05 and exceeds the trainers' wait ratio (when known; when not, when the buffers are full ≥ 90% of the time:
 *       data is not what they wait for). The advice: {@code --balance cost} when the job balances counts, else a smaller
 *       {@code --pack-tokens} or a {@code --pack-patches} limit to even out the packs.</li>
 *   <li><b>TRAINER_BOUND</b> ({@code trainer}): buffers full ≥ 90% of the time and the trainers'
 *       wait ratio ≤ 0.05 (or unknown) — data is not the bottleneck.</li>
 *   <li><b>TRANSPORT_BOUND</b> ({@code transport}): buffers full ≥ 50% of the time, yet the trainers
 *       wait (wait ratio > 0.05) and, when known, the transfer makes up ≥ 50% of their wait: batches
 *       are ready but moving them to the trainer costs the time. The advice depends on whether they
 *       already go by reference.</li>
 *   <li><b>CPU_BOUND</b> ({@code video_decode}): the CPU pool busy ≥ 75%, the pipeline starved, and video decoding ≥ 50%
 *       of the CPU stage's time ({@link Video}): the advice is about the frames kept.</li>
 *   <li><b>CPU_BOUND</b> ({@code encode}): the CPU pool busy ≥ 90% and the pipeline starved
 *       (buffers empty ≥ 50% of the time; in the unbuffered modes, always).</li>
 *   <li><b>IO_BOUND</b> ({@code fetch}): starved, the CPU pool busy < 50%, and either fetches in flight
 *       pinned at their limit ≥ 50% of the time or fetch latency dominating (the fetch slots' rate,
 *       limit / fetch p50, below the CPU pool's, threads / encode p50).</li>
 *   <li>Weaker reads of a starved pipeline: CPU busy ≥ 75% → CPU_BOUND; fetch pinned ≥ 25% →
 *       IO_BOUND. Unbuffered modes (serial, concurrent) with neither resource busy: TRAINER_BOUND
 *       when the trainers' wait ratio is known and ≤ 0.05, else BALANCED (work runs only when asked).</li>
 *   <li>Otherwise <b>BALANCED</b> ({@code none}): no single stage is saturated.</li>
 * </ol>
 *
 * <p>Threading: pure functions.
 */
public final class Bottleneck {
    static final double FULL_TRAINER = 0.90;
    static final double FULL_TRANSPORT = 0.50;
    static final double LOW_WAIT = 0.05;
    static final double STARVED = 0.50;
    static final double CPU_SATURATED = 0.90;
    static final double CPU_IDLE = 0.50;
    static final double CPU_LEANING = 0.75;
    static final double PINNED = 0.50;
    static final double PINNED_LEANING = 0.25;
    /** Loss to imbalance (1 − mean/max predicted rank cost) from which a packed job can be straggler-bound. */
    static final double STRAGGLER_LOSS = 0.05;

    private Bottleneck() {}

    /**
     * Everything the rules read.
     *
     * @param timeline         the sampled feed
     * @param fetchP50Nanos    fetch latency p50 (first byte when the source measured it, else the whole sample); 0 unknown
     * @param fetchFirstByte   whether {@code fetchP50Nanos} is a first-byte latency
     * @param encodeP50Nanos   CPU time per sample p50 (encode, or prepare + pixel write); 0 unknown
     * @param trainerWaitRatio the trainers' wait-time ratio, when known
     * @param transferShare    the part of the trainers' wait spent moving batches, when known
     * @param byReference      whether batches are already handed over by reference (zero-copy shared memory), so that
     *                         a transport-bound verdict does not advise what the job already does
     * @param packing          a packed job's balance figures; null for an unpacked job (or before its first step)
     * @param video            a job's video decoding figures; null when it decoded no video
     */
    public record Inputs(FeedSampler.Timeline timeline, long fetchP50Nanos, boolean fetchFirstByte, long encodeP50Nanos,
                         OptionalDouble trainerWaitRatio, OptionalDouble transferShare, boolean byReference, Packing packing,
                         Video video) {
        /** The inputs of an unpacked job. */
        public Inputs(FeedSampler.Timeline timeline, long fetchP50Nanos, boolean fetchFirstByte, long encodeP50Nanos,
                      OptionalDouble trainerWaitRatio, OptionalDouble transferShare, boolean byReference) {
            this(timeline, fetchP50Nanos, fetchFirstByte, encodeP50Nanos, trainerWaitRatio, transferShare, byReference, null, null);
        }

        /** The inputs of a job without video figures. */
        public Inputs(FeedSampler.Timeline timeline, long fetchP50Nanos, boolean fetchFirstByte, long encodeP50Nanos,
                      OptionalDouble trainerWaitRatio, OptionalDouble transferShare, boolean byReference, Packing packing) {
            this(timeline, fetchP50Nanos, fetchFirstByte, encodeP50Nanos, trainerWaitRatio, transferShare, byReference, packing, null);
        }

        public Inputs withTrainer(double waitRatio, OptionalDouble transferShare) {
            return new Inputs(timeline, fetchP50Nanos, fetchFirstByte, encodeP50Nanos, OptionalDouble.of(waitRatio), transferShare,
                    byReference, packing, video);
        }

        public Inputs withPacking(Packing packing) {
            return new Inputs(timeline, fetchP50Nanos, fetchFirstByte, encodeP50Nanos, trainerWaitRatio, transferShare, byReference, packing,
                    video);
        }

        public Inputs withVideo(Video video) {
            return new Inputs(timeline, fetchP50Nanos, fetchFirstByte, encodeP50Nanos, trainerWaitRatio, transferShare, byReference, packing,
                    video);
        }
    }

    /**
     * A job's video decoding, as the CPU-bound rule reads it (issue 29): a CPU-bound feed whose CPU stage spends at least
     * {@link #VIDEO_SHARE} of its time decoding video is limited by video decoding, and the advice is about frames.
     *
     * @param decodeShare      video decoding's share of the CPU stage's busy time (sampled frames, RGB conversion, resize)
     * @param decodedPerKept   frames libavcodec decoded per frame kept (1.0 the least possible)
     */
    public record Video(double decodeShare, double decodedPerKept) {}

    /** The share of the CPU stage's time from which video decoding is named as the bottleneck. */
    static final double VIDEO_SHARE = 0.5;

    /**
     * A packed job's balance, as the STRAGGLER_BOUND rule reads it.
     *
     * @param steps         the packed steps the figures average over (the recent window)
     * @param imbalance     their mean max / mean predicted rank cost
     * @param imbalanceLoss their mean {@code 1 − mean / max} predicted rank cost: the share of a step the ranks lose
     *                      waiting for the slowest
     * @param balance       how the job shares samples between ranks; null when not known
     */
    public record Packing(long steps, double imbalance, double imbalanceLoss, PackPlanner.Balance balance) {
        /** The recent window of {@code s}; null when {@code s} is (an unpacked job). */
        public static Packing of(PackStats.Summary s) {
            if (s == null) return null;
            var balance = s.balance() == null ? null : PackPlanner.Balance.valueOf(s.balance().toUpperCase(Locale.ROOT));
            return new Packing(s.recentSteps(), s.recentImbalance(), s.recentImbalanceLoss(), balance);
        }
    }

    /**
     * The verdict from the trainers' wait alone, where no feed timeline is sampled: a cluster job's coordinator, whose
     * batches are made by its nodes' pipelines. {@code waitRatio} is every rank's (steady) wait ratio together, empty before
     * any step; {@code evidence} says what it was measured over (ranks, nodes, the node whose ranks wait most). TRAINER_BOUND
     * when the trainers wait at most {@link #LOW_WAIT} (the same threshold as {@link #classify}), else DATA_BOUND (stage
     * {@code data}): they wait for data, and the stage that holds it back is in the nodes' own figures.
     */
    public static BottleneckVerdict fromTrainers(OptionalDouble waitRatio, String evidence) {
        var figures = new HashMap<String, Double>();
        if (waitRatio.isEmpty())
            return new BottleneckVerdict(BottleneckVerdict.Kind.BALANCED, "none", "no trainer has reported a step yet", "", figures);
        double w = waitRatio.getAsDouble();
        figures.put("trainer_wait_ratio", w);
        String text = String.format(Locale.ROOT, "trainer wait ratio %.3f", w) + (evidence == null || evidence.isEmpty() ? "" : ", " + evidence);
        if (w <= LOW_WAIT)
            return new BottleneckVerdict(BottleneckVerdict.Kind.TRAINER_BOUND, "trainer", text,
                    "data is not the bottleneck: the trainers' own compute is", figures);
        return new BottleneckVerdict(BottleneckVerdict.Kind.DATA_BOUND, "data", text,
                "the trainers wait for data: look first at the nodes whose ranks wait most (each node's --metrics-file holds its "
                        + "pipeline's counters); more workers (--workers, --slots) or nodes, and spread placement, share the work", figures);
    }

    /** The verdict for {@code in}. */
    public static BottleneckVerdict classify(Inputs in) {
        var tl = in.timeline();
        List<FeedSampler.Tick> ticks = steady(tl.ticks());
        var figures = new HashMap<String, Double>();
        in.trainerWaitRatio().ifPresent(w -> figures.put("trainer_wait_ratio", w));
        in.transferShare().ifPresent(s -> figures.put("transfer_share", s));
        var packing = in.packing() != null && in.packing().steps() > 0 ? in.packing() : null;
        if (packing != null) {
            figures.put("pack_imbalance", round(packing.imbalance()));
            figures.put("imbalance_loss", round(packing.imbalanceLoss()));
        }
        var video = in.video();
        if (video != null) { // known whether or not the feed was sampled yet
            figures.put("video_decode_share", round(video.decodeShare()));
            figures.put("video_frames_decoded_per_kept", round(video.decodedPerKept()));
        }
        if (ticks.isEmpty())
            return new BottleneckVerdict(BottleneckVerdict.Kind.BALANCED, "none", "no samples of the feed yet", "", figures);

        double full = 0, empty = 0, cpu = 0, pinned = 0;
        long maxInFlight = 0;
        for (var t : ticks) {
            int r = t.bufferFull().length;
            int nFull = 0, nEmpty = 0;
            for (int i = 0; i < r; i++) {
                if (t.bufferFull()[i]) nFull++;
                if (t.bufferedBatches()[i] == 0) nEmpty++;
            }
            if (r > 0) {
                full += (double) nFull / r;
                empty += (double) nEmpty / r;
            }
            cpu += Math.min(1.0, (double) t.cpuBusy() / Math.max(1, tl.cpuThreads()));
            if (t.fetchInFlight() >= tl.fetchLimit()) pinned++;
            maxInFlight = Math.max(maxInFlight, t.fetchInFlight());
        }
        int n = ticks.size();
        full /= n;
        empty /= n;
        cpu /= n;
        pinned /= n;
        boolean buffered = tl.buffered();
        if (!buffered) {
            full = 0;
            empty = 1;
        }
        figures.put("buffer_full_fraction", round(full));
        figures.put("buffer_empty_fraction", round(empty));
        figures.put("cpu_busy_fraction", round(cpu));
        figures.put("fetch_pinned_fraction", round(pinned));

        var wait = in.trainerWaitRatio();
        String waitText = wait.isPresent() ? String.format(Locale.ROOT, ", trainer wait ratio %.3f", wait.getAsDouble()) : "";
        String fetchLat = in.fetchP50Nanos() > 0
                ? String.format(Locale.ROOT, "%s p50 %s", in.fetchFirstByte() ? "first byte" : "fetch", ms(in.fetchP50Nanos())) : "";
        String cpuText = String.format(Locale.ROOT, "decode pool busy %s on %d thread%s", pct(cpu), tl.cpuThreads(),
                tl.cpuThreads() == 1 ? "" : "s");

        if (packing != null && packing.imbalanceLoss() >= STRAGGLER_LOSS
                && (wait.isPresent() ? packing.imbalanceLoss() > wait.getAsDouble() : buffered && full >= FULL_TRAINER)) {
            String than = wait.isPresent()
                    ? String.format(Locale.ROOT, ", more than the trainers' wait ratio %.3f for data", wait.getAsDouble())
                    : ", while prefetch buffers are full " + pct(full) + " of the time (data is not what they wait for)";
            String evidence = String.format(Locale.ROOT, "predicted step cost imbalance %.3f (max/mean rank cost over the last %d packed steps): "
                    + "ranks lose %s of each step waiting for the slowest", packing.imbalance(), packing.steps(),
                    pct1(packing.imbalanceLoss())) + than;
            String advice = packing.balance() == PackPlanner.Balance.COUNT
                    ? "balance the ranks' predicted cost, not their sample counts (--balance cost)"
                    : "even out the packs: a smaller --pack-tokens, or a --pack-patches limit so that no rank's pack takes most of a step's images";
            return new BottleneckVerdict(BottleneckVerdict.Kind.STRAGGLER_BOUND, "balance", evidence, advice, figures);
        }
        if (buffered && full >= FULL_TRAINER && (wait.isEmpty() || wait.getAsDouble() <= LOW_WAIT))
            return new BottleneckVerdict(BottleneckVerdict.Kind.TRAINER_BOUND, "trainer",
                    "prefetch buffers full " + pct(full) + " of the time" + waitText, "data is not the bottleneck", figures);
        if (buffered && full >= FULL_TRANSPORT && wait.isPresent() && wait.getAsDouble() > LOW_WAIT
                && (in.transferShare().isEmpty() || in.transferShare().getAsDouble() >= 0.5)) {
            String share = in.transferShare().isPresent() ? ", transfer " + pct(in.transferShare().getAsDouble()) + " of the wait" : "";
            return new BottleneckVerdict(BottleneckVerdict.Kind.TRANSPORT_BOUND, "transport",
                    "prefetch buffers full " + pct(full) + " of the time but trainers still wait" + waitText + share,
                    in.byReference()
                            ? "batches already go by reference: the hand-over itself (the request's round trip, the client's "
                                    + "conversion of the batch) costs the time; take more samples per request (--batch) or "
                                    + "keep the tensors as numpy views"
                            : "hand batches over by reference (--mode zero-copy) or make them smaller", figures);
        }
        boolean starved = empty >= STARVED;
        String starvedText = buffered ? ", buffers empty " + pct(empty) + " of the time" : "";
        String cpuAdvice = "give the CPU stage more cores (--threads) or cheaper images (lower --max-pixels, --decode-scale auto)";
        String ioAdvice = "raise --fetch-concurrency or add nodes";
        String pinnedText = "fetch in-flight pinned at " + tl.fetchLimit() + " " + pct(pinned) + " of the time"
                + (fetchLat.isEmpty() ? "" : ", " + fetchLat);
        if (starved && cpu >= CPU_LEANING && video != null && video.decodeShare() >= VIDEO_SHARE)
            return new BottleneckVerdict(BottleneckVerdict.Kind.CPU_BOUND, "video_decode", cpuText + starvedText + ", video decoding "
                    + pct(video.decodeShare()) + " of it (" + String.format(Locale.ROOT, "%.2f", video.decodedPerKept())
                    + " frames decoded per frame kept)", "keep fewer or smaller video frames (--video-fps, --video-max-frames, "
                    + "--video-max-pixels) or give the CPU stage more cores (--threads)", figures);
        if (starved && cpu >= CPU_SATURATED)
            return new BottleneckVerdict(BottleneckVerdict.Kind.CPU_BOUND, "encode", cpuText + starvedText, cpuAdvice, figures);
        if (starved && cpu < CPU_IDLE) {
            boolean latencyDominates = in.fetchP50Nanos() > 0 && in.encodeP50Nanos() > 0
                    && (double) tl.fetchLimit() / in.fetchP50Nanos() < (double) tl.cpuThreads() / in.encodeP50Nanos();
            if (pinned >= PINNED)
                return new BottleneckVerdict(BottleneckVerdict.Kind.IO_BOUND, "fetch", pinnedText + ", " + cpuText + starvedText,
                        ioAdvice, figures);
            if (latencyDominates)
                return new BottleneckVerdict(BottleneckVerdict.Kind.IO_BOUND, "fetch",
                        fetchLat + " against encode p50 " + ms(in.encodeP50Nanos()) + " with " + tl.fetchLimit() + " fetch slots, "
                                + cpuText + starvedText, ioAdvice, figures);
        }
        if (starved && cpu >= CPU_LEANING)
            return new BottleneckVerdict(BottleneckVerdict.Kind.CPU_BOUND, "encode", cpuText + starvedText, cpuAdvice, figures);
        if (starved && pinned >= PINNED_LEANING)
            return new BottleneckVerdict(BottleneckVerdict.Kind.IO_BOUND, "fetch", pinnedText + ", " + cpuText + starvedText,
                    ioAdvice, figures);
        if (!buffered) {
            if (wait.isPresent() && wait.getAsDouble() <= LOW_WAIT)
                return new BottleneckVerdict(BottleneckVerdict.Kind.TRAINER_BOUND, "trainer",
                        "pipeline idle between requests" + waitText, "data is not the bottleneck", figures);
            return new BottleneckVerdict(BottleneckVerdict.Kind.BALANCED, "none",
                    "work runs only when a trainer asks: " + cpuText + ", fetch pinned " + pct(pinned) + " of the time" + waitText,
                    "prefetch (--mode prefetch or zero-copy) to overlap data work with training", figures);
        }
        return new BottleneckVerdict(BottleneckVerdict.Kind.BALANCED, "none",
                "no stage saturated: buffers full " + pct(full) + " and empty " + pct(empty) + " of the time, " + cpuText
                        + ", fetch pinned " + pct(pinned) + " of the time" + waitText, "", figures);
    }

    /** The ticks from the first one that saw a delivered sample on; all of them if none did. */
    static List<FeedSampler.Tick> steady(List<FeedSampler.Tick> ticks) {
        for (int i = 0; i < ticks.size(); i++)
            if (ticks.get(i).delivered() > 0) return ticks.subList(i, ticks.size());
        return ticks;
    }

    private static double round(double v) { return Math.round(v * 1000) / 1000.0; }

    private static String pct(double f) { return Math.round(f * 100) + "%"; }

    private static String pct1(double f) { return String.format(Locale.ROOT, "%.1f%%", f * 100); }

    private static String ms(long nanos) {
        double m = nanos / 1e6;
        return m >= 10 ? Math.round(m) + " ms" : String.format(Locale.ROOT, "%.1f ms", m);
    }
}
