package dev.stoker.pipeline.feed;

import dev.stoker.core.SampleException.Kind;
import dev.stoker.core.SampleException;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.EnumMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The samples a feed skipped, counted: errors and filtered, by stage and by cause (at most {@link FeedErrors#MAX_CAUSES}
 * causes apart, later ones as their kind and stage's {@link FeedErrors#OTHER_REASON}), the last
 * {@link FeedErrors#LAST_CAUSES} errors for a failure's message, and the first {@link FeedErrors#MAX_RECORDS} samples
 * themselves. Only the counting: when a sample is recorded, and what the counts decide, is {@link FeedErrors}' policy.
 *
 * <p>Threading: not thread-safe; its owner counts under its own lock.
 */
final class SkipCounts {
    private final List<FeedError> records = new ArrayList<>();
    private final ArrayDeque<FeedError> last = new ArrayDeque<>(FeedErrors.LAST_CAUSES);
    private final EnumMap<SampleException.Stage, Long> byStage = new EnumMap<>(SampleException.Stage.class);
    private final LinkedHashMap<String, Tally> causes = new LinkedHashMap<>();
    private long total, errors, filtered;

    /** Samples of one cause, the first of them kept as the example. */
    private static final class Tally {
        final Kind kind;
        final SampleException.Stage stage;
        final String reason;
        final FeedError example;
        long count;

        Tally(Kind kind, SampleException.Stage stage, String reason, FeedError example) {
            this.kind = kind;
            this.stage = stage;
            this.reason = reason;
            this.example = example;
        }

        FeedErrors.Cause cause() {
            return new FeedErrors.Cause(kind.label(), stage.name().toLowerCase(Locale.ROOT), reason, count, example.sampleId());
        }
    }

    /** Counts {@code e}: its kind, its stage and its cause; keeps it while fewer than {@link FeedErrors#MAX_RECORDS} are kept. */
    void add(FeedError e) {
        total++;
        if (e.kind() == Kind.FILTERED) {
            filtered++;
        } else {
            errors++;
            if (last.size() == FeedErrors.LAST_CAUSES) last.removeFirst();
            last.addLast(e);
        }
        byStage.merge(e.stage(), 1L, Long::sum);
        count(e);
        if (records.size() < FeedErrors.MAX_RECORDS) records.add(e);
    }

    /** Counts {@code e} under its cause; past {@link FeedErrors#MAX_CAUSES} causes, a new one counts as its kind and stage's "other". */
    private void count(FeedError e) {
        String reason = e.reason();
        String key = e.kind() + "\u0000" + e.stage() + "\u0000" + reason;
        var tally = causes.get(key);
        if (tally == null && causes.size() >= FeedErrors.MAX_CAUSES) {
            reason = FeedErrors.OTHER_REASON;
            key = e.kind() + "\u0000" + e.stage() + "\u0000" + reason;
            tally = causes.get(key);
        }
        if (tally == null) causes.put(key, tally = new Tally(e.kind(), e.stage(), reason, e));
        tally.count++;
    }

    long total() { return total; }

    long errors() { return errors; }

    long filtered() { return filtered; }

    Map<SampleException.Stage, Long> byStage() { return Map.copyOf(byStage); }

    /** The last errors counted, oldest first (at most {@link FeedErrors#LAST_CAUSES}). */
    List<FeedError> lastErrors() { return List.copyOf(last); }

    List<FeedError> records() { return List.copyOf(records); }

    /** The counts by kind, stage and cause, the most common cause first. */
    FeedErrors.Counts counts() {
        var list = causes.values().stream().map(Tally::cause).sorted(Comparator.comparingLong(c -> -c.count())).toList();
        return new FeedErrors.Counts(errors, filtered, Map.copyOf(byStage), list);
    }

    /** {@code most common cause: stage: reason, n of m (e.g. id); then …} over the errors counted, at most {@code n} causes. */
    String mostCommonErrors(int n) {
        var ranked = causes.values().stream().filter(t -> t.kind == Kind.ERROR).sorted(Comparator.comparingLong(t -> -t.count))
                .limit(n).toList();
        var sb = new StringBuilder(ranked.size() > 1 ? "most common causes: " : "most common cause: ");
        for (int i = 0; i < ranked.size(); i++) {
            var t = ranked.get(i);
            sb.append(i == 0 ? "" : "; then ").append(t.cause().label()).append(", ").append(t.count).append(" of ").append(errors)
                    .append(" (e.g. ").append(t.example.sampleId()).append(')');
        }
        return sb.toString();
    }
}
