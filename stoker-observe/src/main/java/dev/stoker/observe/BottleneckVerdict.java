package dev.stoker.observe;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * What limits a feed, as {@link Bottleneck#classify} judged it.
 *
 * @param kind     the kind of limit
 * @param stage    the limiting stage: {@code fetch}, {@code encode}, {@code video_decode} (a CPU-bound job whose CPU time is
 *                 mostly video decoding), {@code transport}, {@code trainer}, {@code balance}
 *                 (straggler-bound: the ranks' packs are uneven), {@code data} (data-bound: which stage is not known) or
 *                 {@code none}
 * @param evidence the figures that led to the verdict, e.g. "fetch in-flight pinned at 64, first byte p50 31 ms"
 * @param advice   what to change first
 * @param figures  the fractions the rules read ({@code buffer_full_fraction}, {@code buffer_empty_fraction},
 *                 {@code cpu_busy_fraction}, {@code fetch_pinned_fraction}, the trainers' when known, and a packed job's
 *                 {@code pack_imbalance} and {@code imbalance_loss}; with a measured compute floor
 *                 ({@link #withHeadspace}) {@code compute_floor_ms}, {@code mean_step_ms}, {@code data_headroom_ms} and
 *                 {@code data_headroom_fraction})
 */
public record BottleneckVerdict(Kind kind, String stage, String evidence, String advice, Map<String, Double> figures) {
    public enum Kind {
        IO_BOUND("I/O-bound"), CPU_BOUND("CPU-bound"), TRANSPORT_BOUND("transport-bound"), TRAINER_BOUND("trainer-bound"),
        /** A packed job whose ranks lose more to the imbalance of their packs' predicted costs than to waiting for data. */
        STRAGGLER_BOUND("straggler-bound"),
        /**
         * The trainers wait for data, and the stage that holds it back was not sampled where the verdict was made: a cluster
         * job's coordinator sees every rank's timings but not its nodes' pipelines ({@link Bottleneck#fromTrainers}).
         */
        DATA_BOUND("data-bound"),
        BALANCED("balanced");

        private final String label;

        Kind(String label) { this.label = label; }

        public String label() { return label; }
    }

    public BottleneckVerdict {
        figures = Map.copyOf(figures);
    }

    /**
     * This verdict with the trainers' headspace (their measured compute floor): its figures join {@link #figures()} and its
     * text ends the evidence, so that the verdict says how much per step the data side can win at most.
     */
    public BottleneckVerdict withHeadspace(Headspace headspace) {
        if (headspace == null) return this;
        var f = new java.util.HashMap<>(figures);
        f.putAll(headspace.figures());
        return new BottleneckVerdict(kind, stage, evidence + "; " + headspace.text(), advice, f);
    }

    /** One line: "CPU-bound: decode pool busy 98% on 2 threads … — advice". */
    public String text() { return kind.label() + ": " + evidence + (advice.isEmpty() ? "" : " — " + advice); }

    /** The {@code verdict} object of {@code docs/run-data.md}. */
    public Map<String, Object> toJson() {
        var m = new LinkedHashMap<String, Object>();
        m.put("kind", kind.name());
        m.put("stage", stage);
        m.put("evidence", evidence);
        m.put("advice", advice);
        m.put("text", text());
        new java.util.TreeMap<>(figures).forEach(m::put);
        return m;
    }

    @Override
    public String toString() { return text(); }
}
