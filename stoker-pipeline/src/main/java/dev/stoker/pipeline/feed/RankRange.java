package dev.stoker.pipeline.feed;

/**
 * The trainer ranks one node serves of a job's world: {@code first} … {@code last}, inclusive. A
 * multi-node job runs one service per node, each building feeds (buffers, store shares) for its
 * own ranks only, while the schedule stays the world's: rank r gets the same batches whichever node
 * serves it.
 *
 * @param first the first rank served
 * @param last  the last rank served (inclusive)
 */
public record RankRange(int first, int last) {
    public RankRange {
        if (first < 0 || last < first) throw new IllegalArgumentException("bad rank range " + first + "-" + last);
    }

    /** Every rank of a world of {@code world} ranks. */
    public static RankRange all(int world) { return new RankRange(0, world - 1); }

    /**
     * {@code A-B} (inclusive) or {@code A} alone for one rank, as {@code --local-ranks} takes it;
     * IllegalArgumentException says what is wrong.
     */
    public static RankRange parse(String text) {
        String s = text.strip();
        int dash = s.indexOf('-', 1);
        try {
            int a = Integer.parseInt(dash < 0 ? s : s.substring(0, dash).strip());
            int b = dash < 0 ? a : Integer.parseInt(s.substring(dash + 1).strip());
            if (a < 0 || b < 0) throw new IllegalArgumentException("ranks are 0 or more, got '" + s + "'");
            if (b < a) throw new IllegalArgumentException("'" + s + "' ends before it starts; expected A-B with A <= B");
            return new RankRange(a, b);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("expected A-B (inclusive) or A, got '" + s + "'");
        }
    }

    /** Ranks served. */
    public int count() { return last - first + 1; }

    public boolean contains(int rank) { return rank >= first && rank <= last; }

    /** Whether this is every rank of a world of {@code world}. */
    public boolean isAll(int world) { return first == 0 && last == world - 1; }

    /** {@code A-B}, or {@code A} for one rank: what {@link #parse} reads back. */
    @Override
    public String toString() { return first == last ? Integer.toString(first) : first + "-" + last; }
}
