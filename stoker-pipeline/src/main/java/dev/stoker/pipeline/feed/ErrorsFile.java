package dev.stoker.pipeline.feed;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.SampleException.Kind;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.plan.schedule.SampleSchedule;
import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * The errors file of a job: one JSON object per skipped sample and line, appended ({@code docs/run-data.md}). A job's
 * runs share it: opening it reads back what earlier runs listed, so that a resumed run lists no sample of an epoch twice
 * (audit #13) and can count the errors of the job before its start ({@link #errorsBefore}).
 *
 * <p>A file that cannot be written (a full disk) must not stop training over its log: the first failure is warned
 * about once, and the file takes no more lines.
 *
 * <p>Threading: not thread-safe; its owner writes under its own lock.
 */
final class ErrorsFile implements AutoCloseable {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final System.Logger LOG = System.getLogger(ErrorsFile.class.getName());

    private final Path file;
    private BufferedWriter out;
    /** (epoch, dataset index) → whether the file lists it as an error (true) or as filtered, as the earlier runs left it. */
    private final Map<Long, Boolean> listed;
    /** (epoch, dataset index) of every sample the file lists: a resumed run does not list them again. */
    private final Set<Long> written = new HashSet<>();

    private ErrorsFile(Path file, BufferedWriter out, Map<Long, Boolean> listed) {
        this.file = file;
        this.out = out;
        this.listed = listed;
        written.addAll(listed.keySet());
    }

    /** Opens {@code file} to append to, its folders created, after reading what it lists already. */
    static ErrorsFile open(Path file) throws IOException {
        Path parent = file.toAbsolutePath().getParent();
        if (parent != null) Files.createDirectories(parent);
        var listed = read(file);
        return new ErrorsFile(file, Files.newBufferedWriter(file, StandardCharsets.UTF_8, StandardOpenOption.CREATE,
                StandardOpenOption.APPEND), listed);
    }

    private static long key(long epoch, int datasetIndex) { return epoch << 32 | (datasetIndex & 0xffffffffL); }

    /**
     * The samples {@code file} lists: (epoch, index) key → whether an error (true) or filtered; lines written before kinds
     * existed are errors.
     */
    private static Map<Long, Boolean> read(Path file) throws IOException {
        var listed = new HashMap<Long, Boolean>();
        if (!Files.exists(file)) return listed;
        try (var lines = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            String line;
            while ((line = lines.readLine()) != null) {
                if (line.isBlank()) continue;
                try {
                    var node = JSON.readTree(line);
                    if (node.hasNonNull("epoch") && node.hasNonNull("index"))
                        listed.put(key(node.get("epoch").asLong(), node.get("index").asInt()),
                                !Kind.FILTERED.label().equals(node.path("kind").asText(Kind.ERROR.label())));
                } catch (IOException notOurs) {
                    // a line not written by us (cut short by a kill): it names no sample to skip again
                }
            }
        }
        return listed;
    }

    /**
     * The errors the file listed when it was opened from before {@code start} in {@code order}: those of earlier epochs,
     * and those of {@code start}'s epoch at a position before it (filtered entries are not errors). Entries from after
     * the start (a job moved back) are not counted: they count again when they are skipped again.
     */
    long errorsBefore(SampleSchedule order, ScheduleCursor start) {
        long n = 0;
        int[] positionOf = null;
        for (var entry : listed.entrySet()) {
            if (!entry.getValue()) continue; // filtered: not an error
            long key = entry.getKey();
            long epoch = key >>> 32;
            int index = (int) key;
            if (epoch > start.epoch()) continue;
            if (epoch == start.epoch()) {
                if (positionOf == null) {
                    int[] perm = order.permutationCopy(epoch);
                    positionOf = new int[perm.length];
                    for (int p = 0; p < perm.length; p++) positionOf[perm[p]] = p;
                }
                if (index < 0 || index >= positionOf.length || positionOf[index] >= start.position()) continue;
            }
            n++;
        }
        return n;
    }

    /** Appends {@code e}, unless the file lists its (epoch, sample) already (an earlier run of the job skipped it too). */
    void append(FeedError e) {
        if (out == null || !written.add(key(e.epoch(), e.datasetIndex()))) return;
        var line = new LinkedHashMap<String, Object>();
        line.put("id", e.sampleId());
        line.put("index", e.datasetIndex());
        line.put("epoch", e.epoch());
        line.put("step", e.step());
        line.put("rank", e.rank());
        line.put("kind", e.kind().label());
        line.put("stage", e.stage().name().toLowerCase(Locale.ROOT));
        line.put("cause", e.cause());
        try {
            out.write(JSON.writeValueAsString(line));
            out.write('\n');
        } catch (IOException ex) {
            failed(ex);
        }
    }

    /** Flushes what was appended: once per batch, so that a kill loses no batch's lines. */
    void flush() {
        if (out == null) return;
        try {
            out.flush();
        } catch (IOException ex) {
            failed(ex);
        }
    }

    /** A full disk must not stop training over its error log: warn once, keep counting, write no more. */
    private void failed(IOException ex) {
        LOG.log(System.Logger.Level.WARNING, "cannot write the errors file " + file + ", skipped samples are only counted from now on: "
                + ex);
        try {
            out.close();
        } catch (IOException ignored) {
            // already failing
        }
        out = null;
    }

    /** Closes the file (everything appended is flushed already). */
    @Override
    public void close() {
        if (out == null) return;
        try {
            out.close();
        } catch (IOException ex) {
            LOG.log(System.Logger.Level.WARNING, "cannot close the errors file " + file + ": " + ex);
        }
        out = null;
    }
}
