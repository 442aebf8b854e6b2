package dev.stoker.cluster;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(30)
class PlacementTest {
    @Test
    void packFillsTheFirstNodeBeforeTheNext() {
        assertArrayEquals(new int[] {0, 0, 0, 0}, Placement.PACK.assign(4, new int[] {4, 4, 4, 4}));
        assertArrayEquals(new int[] {0, 0, 1, 1, 1}, Placement.PACK.assign(5, new int[] {2, 3, 4}));
    }

    @Test
    void spreadDealsWorkersOverTheNodesInTurn() {
        assertArrayEquals(new int[] {0, 1, 2, 3}, Placement.SPREAD.assign(4, new int[] {4, 4, 4, 4}));
        assertArrayEquals(new int[] {0, 1, 2, 0, 1, 2}, Placement.SPREAD.assign(6, new int[] {4, 4, 4}));
        assertEquals(List.of(2, 2, 2), Placement.perNode(Placement.SPREAD.assign(6, new int[] {4, 4, 4}), 3));
    }

    @Test
    void nodesWithoutSlotsGetNoWorkers() {
        assertArrayEquals(new int[] {1, 2, 1, 2}, Placement.SPREAD.assign(4, new int[] {0, 4, 4}));
        assertArrayEquals(new int[] {1, 1}, Placement.PACK.assign(2, new int[] {0, 4}));
    }

    @Test
    void moreWorkersThanSlotsGoToTheLeastLoadedNode() {
        assertEquals(List.of(2, 2), Placement.perNode(Placement.PACK.assign(4, new int[] {1, 1}), 2));
        assertEquals(List.of(3, 1), Placement.perNode(Placement.SPREAD.assign(4, new int[] {3, 1}), 2));
    }

    @Test
    void noSlotsAnywhereIsRefused() {
        var e = assertThrows(IllegalArgumentException.class, () -> Placement.SPREAD.assign(2, new int[] {0, 0}));
        assertEquals("no node takes workers (every node has 0 slots)", e.getMessage());
    }
}
