package dev.stoker.cluster;

import java.util.ArrayList;
import java.util.List;

/**
 * Where a job's workers run. {@code PACK} fills one node's slots before the next (what an engine
 * does by default: fewest nodes used); {@code SPREAD} deals workers over the nodes in turn, so that
 * each node's network card carries its share of the batches.
 */
public enum Placement {
    PACK, SPREAD;

    /**
     * Assigns {@code workers} workers to nodes with {@code slots[i]} free slots each (nodes in a fixed
     * order); returns each worker's node index. When the slots run out, the rest go to the least
     * loaded node (over-subscribed rather than refused). Throws when no node takes workers.
     */
    public int[] assign(int workers, int[] slots) {
        if (workers <= 0) throw new IllegalArgumentException("workers must be positive, got " + workers);
        int total = 0;
        for (int s : slots) total += Math.max(0, s);
        if (total == 0) throw new IllegalArgumentException("no node takes workers (every node has 0 slots)");
        int[] load = new int[slots.length];
        int[] out = new int[workers];
        int turn = 0;
        for (int w = 0; w < workers; w++) {
            int chosen = -1;
            if (this == PACK) {
                for (int i = 0; i < slots.length && chosen < 0; i++) if (load[i] < slots[i]) chosen = i;
            } else {
                for (int k = 0; k < slots.length && chosen < 0; k++) {
                    int i = (turn + k) % slots.length;
                    if (load[i] < slots[i]) {
                        chosen = i;
                        turn = i + 1;
                    }
                }
            }
            if (chosen < 0) chosen = leastLoaded(load, slots);
            load[chosen]++;
            out[w] = chosen;
        }
        return out;
    }

    private static int leastLoaded(int[] load, int[] slots) {
        int best = -1;
        for (int i = 0; i < load.length; i++) {
            if (slots[i] <= 0) continue;
            if (best < 0 || (double) load[i] / slots[i] < (double) load[best] / slots[best]) best = i;
        }
        return best;
    }

    /** Workers per node for an assignment. */
    public static List<Integer> perNode(int[] assignment, int nodes) {
        var counts = new ArrayList<Integer>();
        for (int i = 0; i < nodes; i++) counts.add(0);
        for (int n : assignment) counts.set(n, counts.get(n) + 1);
        return counts;
    }
}
