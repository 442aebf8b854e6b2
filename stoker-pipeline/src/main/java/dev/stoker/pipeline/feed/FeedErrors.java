package dev.stoker.pipeline.feed;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.SampleException;
import dev.stoker.pipeline.batch.FeedBatch;
import dev.stoker.pipeline.schedule.SampleSchedule;
import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.function.Consumer;

/**
 * The samples a feed skipped, and its bad-input policy ({@link ErrorPolicy}): every skipped sample
 * counted by stage, the first {@link #MAX_RECORDS} kept in memory, and each one appended to the
 * errors file when there is one (one JSON object per line, flushed per batch: {@code docs/run-data.md}).
 *
 * <p>Samples are recorded when their batch is delivered, so that per rank delivered + skipped =
 * scheduled holds for what the trainer saw. The policy is judged at the same point (a rate over
 * the limit) and, under FAIL, already when a rank's stream produces a batch with a bad sample, so
 * that the feed stops before the trainer reaches it. Once failed, the failure is final: every later
 * call returns it, and the listeners (the feeder, which fails every rank) were told once.
 *
 * <p>Threading: thread-safe; writers are pipeline threads and consumer threads, readers anyone.
 * The file is written under the lock; bad samples are rare, so this costs nothing on good batches.
 */
public final class FeedErrors implements AutoCloseable {
    public static final int MAX_RECORDS = 10_000;
    /**
     * Scheduled samples (of delivered batches, all ranks) before the error rate is judged: below
     * this a single bad sample early in a run would be a rate of several percent.
     */
    public static final long MIN_SCHEDULED_FOR_RATE = 100;
    /** Causes quoted in the message of a run failed for its error rate. */
    static final int LAST_CAUSES = 3;

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final System.Logger LOG = System.getLogger(FeedErrors.class.getName());

    private final ErrorPolicy policy;
    private final double maxErrorRate;
    private final Path file;
    private BufferedWriter out;
    private final List<FeedError> records = new ArrayList<>();
    private final ArrayDeque<FeedError> last = new ArrayDeque<>(LAST_CAUSES);
    private final EnumMap<SampleException.Stage, Long> byStage = new EnumMap<>(SampleException.Stage.class);
    private final List<Consumer<BadInputException>> listeners = new ArrayList<>();
    private long total;
    private long scheduled;
    private long priorErrors, priorScheduled;
    private BadInputException failure;

    private FeedErrors(ErrorPolicy policy, double maxErrorRate, Path file, BufferedWriter out) {
        this.policy = policy;
        this.maxErrorRate = maxErrorRate;
        this.file = file;
        this.out = out;
    }

    /** The policy of {@code config}, appending to its errors file (created with its folders) when it names one. */
    static FeedErrors open(FeedConfig config) throws IOException { return open(config, null); }

    /**
     * {@link #open(FeedConfig)} for a feed of {@code schedule} (null: none) starting at {@code config.start()}: a feed that
     * does not start at the origin (a restarted service, a trainer's resume) judges its error rate over the job so far, as
     * the errors file tells it, rather than from zero at each start (audit #13). Before the start it counts the samples the
     * schedule had up to there ({@link #priorScheduled()}, in this schedule's steps: exact unless the rank count changed)
     * and the file's samples among them ({@link #priorErrors()}); samples it lists from after the start (a job moved back)
     * are counted again when they are skipped again.
     */
    static FeedErrors open(FeedConfig config, SampleSchedule schedule) throws IOException {
        Path file = config.errorsFile();
        BufferedWriter out = null;
        if (file != null) {
            Path parent = file.toAbsolutePath().getParent();
            if (parent != null) Files.createDirectories(parent);
            var listed = listed(file);
            out = Files.newBufferedWriter(file, StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
            var opened = new FeedErrors(config.onError(), config.maxErrorRate(), file, out);
            opened.written.addAll(listed);
            if (schedule != null) opened.countBefore(schedule, config.start(), listed);
            return opened;
        }
        return new FeedErrors(config.onError(), config.maxErrorRate(), file, out);
    }

    /** The job's samples before {@code start}, and the listed ones among them, go into the error rate. */
    private void countBefore(SampleSchedule schedule, dev.stoker.core.ScheduleCursor start, java.util.Set<Long> listed) {
        long perEpoch = schedule.stepsPerEpoch() * schedule.positionsPerStep();
        priorScheduled = start.epoch() * perEpoch + start.position();
        int[] positionOf = null;
        for (long key : listed) {
            long epoch = key >>> 32;
            int index = (int) key;
            if (epoch > start.epoch()) continue;
            if (epoch == start.epoch()) {
                if (positionOf == null) {
                    int[] perm = schedule.permutationCopy(epoch);
                    positionOf = new int[perm.length];
                    for (int p = 0; p < perm.length; p++) positionOf[perm[p]] = p;
                }
                if (index < 0 || index >= positionOf.length || positionOf[index] >= start.position()) continue;
            }
            priorErrors++;
        }
    }

    /** Samples the schedule had before this feed's start (0 without an errors file, or at the origin). */
    public synchronized long priorScheduled() { return priorScheduled; }

    /** Samples the errors file lists from before this feed's start. */
    public synchronized long priorErrors() { return priorErrors; }

    /** (epoch, dataset index) of every sample the errors file lists already: a resumed run does not list them again (audit #13). */
    private final java.util.Set<Long> written = new java.util.HashSet<>();

    private static long key(long epoch, int datasetIndex) { return epoch << 32 | (datasetIndex & 0xffffffffL); }

    private static java.util.Set<Long> listed(Path file) throws IOException {
        var written = new java.util.HashSet<Long>();
        if (!Files.exists(file)) return written;
        try (var lines = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            String line;
            while ((line = lines.readLine()) != null) {
                if (line.isBlank()) continue;
                try {
                    var node = JSON.readTree(line);
                    if (node.hasNonNull("epoch") && node.hasNonNull("index")) written.add(key(node.get("epoch").asLong(), node.get("index").asInt()));
                } catch (IOException notOurs) {
                    // a line not written by us (cut short by a kill): it names no sample to skip again
                }
            }
        }
        return written;
    }

    /**
     * A rank's stream produced {@code b}. Under FAIL a bad sample in it fails the feed here. Returns
     * the feed's failure (this one or an earlier one), or null while it runs.
     */
    BadInputException produced(FeedBatch b) {
        List<Consumer<BadInputException>> tell;
        synchronized (this) {
            if (failure != null || policy != ErrorPolicy.FAIL || b.skipped() == 0) return failure;
            var bad = recordAll(b);
            tell = fail(new BadInputException("bad input, stopped at the first bad sample (error policy FAIL): "
                    + bad.getFirst().describe() + (bad.size() > 1 ? " (and " + (bad.size() - 1) + " more in the same batch)" : ""), bad));
        }
        return notify(tell);
    }

    /**
     * {@code b} is being handed to its rank: records its skipped samples and judges the policy.
     * Returns the feed's failure (then {@code b} must not be delivered), or null.
     */
    BadInputException delivered(FeedBatch b) {
        if (policy == ErrorPolicy.FAIL) return produced(b);
        return delivered(b.epoch(), b.step(), b.rank(), b.scheduled(), b.skippedSamples());
    }

    /** Under SKIP: rank {@code rank}'s batch of (epoch, step), {@code scheduled} samples of which {@code skipped} were left out, is being handed out. */
    BadInputException delivered(long epoch, long step, int rank, int scheduledInBatch, List<dev.stoker.pipeline.batch.SkippedSample> skipped) {
        List<Consumer<BadInputException>> tell;
        synchronized (this) {
            if (failure != null) return failure;
            if (!skipped.isEmpty()) recordAll(epoch, step, rank, skipped);
            scheduled += scheduledInBatch;
            long bad = total + priorErrors, of = scheduled + priorScheduled;
            if (maxErrorRate >= 1 || of < MIN_SCHEDULED_FOR_RATE || bad <= maxErrorRate * of) return null;
            var causes = new StringBuilder();
            for (var e : last) causes.append(causes.isEmpty() ? "" : "; ").append(e.describe());
            tell = fail(new BadInputException(String.format(Locale.ROOT,
                    "bad input: %d of %d scheduled samples skipped (%.2f%%)%s, over the limit of %.2f%% (max error rate %s); last: %s",
                    bad, of, 100.0 * bad / of, priorScheduled == 0 ? "" : String.format(Locale.ROOT,
                            ", %d of %d of them before this service started (from the errors file)", priorErrors, priorScheduled),
                    100 * maxErrorRate, maxErrorRate, causes), List.copyOf(last)));
        }
        return notify(tell);
    }

    /** Records every skipped sample of {@code b} and writes them to the file; returns them. Under the lock. */
    private List<FeedError> recordAll(FeedBatch b) { return recordAll(b.epoch(), b.step(), b.rank(), b.skippedSamples()); }

    /** Records the samples skipped in rank {@code rank}'s batch of (epoch, step); returns them. */
    synchronized List<FeedError> recordAll(long epoch, long step, int rank, List<dev.stoker.pipeline.batch.SkippedSample> skipped) {
        var recorded = new ArrayList<FeedError>(skipped.size());
        for (var s : skipped) {
            var e = new FeedError(s.sampleId(), s.datasetIndex(), epoch, step, rank, s.stage(), s.cause());
            record(e);
            recorded.add(e);
        }
        flush();
        return recorded;
    }

    private void record(FeedError e) {
        total++;
        byStage.merge(e.stage(), 1L, Long::sum);
        if (records.size() < MAX_RECORDS) records.add(e);
        if (last.size() == LAST_CAUSES) last.removeFirst();
        last.addLast(e);
        if (out == null || !written.add(key(e.epoch(), e.datasetIndex()))) return; // listed by an earlier run of this job already
        var line = new LinkedHashMap<String, Object>();
        line.put("id", e.sampleId());
        line.put("index", e.datasetIndex());
        line.put("epoch", e.epoch());
        line.put("step", e.step());
        line.put("rank", e.rank());
        line.put("stage", e.stage().name().toLowerCase(Locale.ROOT));
        line.put("cause", e.cause());
        try {
            out.write(JSON.writeValueAsString(line));
            out.write('\n');
        } catch (IOException ex) {
            fileFailed(ex);
        }
    }

    private void flush() {
        if (out == null) return;
        try {
            out.flush();
        } catch (IOException ex) {
            fileFailed(ex);
        }
    }

    /** A full disk must not stop training over its error log: warn once, keep counting, write no more. */
    private void fileFailed(IOException ex) {
        LOG.log(System.Logger.Level.WARNING, "cannot write the errors file " + file + ", skipped samples are only counted from now on: " + ex);
        try {
            out.close();
        } catch (IOException ignored) {
            // already failing
        }
        out = null;
    }

    private List<Consumer<BadInputException>> fail(BadInputException e) {
        failure = e;
        return List.copyOf(listeners);
    }

    private BadInputException notify(List<Consumer<BadInputException>> tell) {
        BadInputException f;
        synchronized (this) {
            f = failure;
        }
        for (var l : tell) l.accept(f);
        return f;
    }

    /** Calls {@code listener} once when the policy fails the feed (at once if it already has). */
    public void onFailure(Consumer<BadInputException> listener) {
        BadInputException now;
        synchronized (this) {
            now = failure;
            if (now == null) listeners.add(listener);
        }
        if (now != null) listener.accept(now);
    }

    /** Why the policy failed the feed, or null while it runs. */
    public synchronized BadInputException failure() { return failure; }

    public ErrorPolicy policy() { return policy; }

    /** Bad samples recorded: skipped in delivered batches, or the one(s) that failed the feed under FAIL. */
    public synchronized long total() { return total; }

    /** Samples scheduled in delivered batches, all ranks (the denominator of the error rate; counted under SKIP). */
    public synchronized long scheduled() { return scheduled; }

    public synchronized Map<SampleException.Stage, Long> byStage() { return Map.copyOf(byStage); }

    /** The kept records, in the order they were recorded (which is not the schedule order across ranks). */
    public synchronized List<FeedError> records() { return List.copyOf(records); }

    /** Closes the errors file (everything recorded is already flushed). */
    @Override
    public synchronized void close() {
        if (out == null) return;
        try {
            out.close();
        } catch (IOException ex) {
            LOG.log(System.Logger.Level.WARNING, "cannot close the errors file " + file + ": " + ex);
        }
        out = null;
    }
}
