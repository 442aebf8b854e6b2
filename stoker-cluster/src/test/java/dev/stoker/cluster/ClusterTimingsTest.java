package dev.stoker.cluster;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.observe.BottleneckVerdict;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The coordinator's gathering of the trainers' timings from the nodes, on made-up reports: per rank and per node sums and
 * wait ratios, and every kind of bad report refused whole, the node's earlier figures kept.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ClusterTimingsTest {
    static final String A = "pekko://stoker@127.0.0.1:2551", B = "pekko://stoker@127.0.0.1:2552";

    static NodeProtocol.RankTiming t(int rank, long steps, long wait, long step, long steadyWait, long steadyStep) {
        return new NodeProtocol.RankTiming(rank, steps, wait, step, steadyWait, steadyStep);
    }

    static NodeProtocol.NodeTimings from(String node, NodeProtocol.RankTiming... ranks) {
        return new NodeProtocol.NodeTimings(node, "j", List.of(ranks));
    }

    /** Four ranks: 0 and 1 on node A, 2 and 3 on node B. */
    static ClusterTimings fourRanks() {
        var c = new ClusterTimings("j", 4);
        c.served(0, A);
        c.served(1, A);
        c.served(2, B);
        c.served(3, B);
        return c;
    }

    @Test
    void sumsPerRankPerNodeAndOverTheWorld() {
        var c = fourRanks();
        assertNull(c.offer(A, from(A, t(0, 10, 100, 900, 50, 650), t(1, 10, 300, 700, 200, 500))));
        assertNull(c.offer(B, from(B, t(2, 5, 0, 1000, 0, 400), t(3, 0, 0, 0, 0, 0))));
        assertNull(c.offer("idle", from("idle")), "a node none of whose trainers reported");
        assertFalse(c.nodes().containsKey("idle"), "is not listed with figures");
        var ranks = c.ranks();
        assertEquals(0.1, ranks.get(0).waitRatio().getAsDouble(), 1e-12);
        assertEquals(50.0 / 700, ranks.get(0).steadyWaitRatio().getAsDouble(), 1e-12);
        assertEquals(0.3, ranks.get(1).waitRatio().getAsDouble(), 1e-12);
        assertEquals(0.0, ranks.get(2).waitRatio().getAsDouble(), 1e-12);
        assertTrue(ranks.get(3).waitRatio().isEmpty(), "a rank with no step has no ratio");
        var nodes = c.nodes();
        assertEquals(400.0 / 2000, nodes.get(A).waitRatio().getAsDouble(), 1e-12);
        assertEquals(0.0, nodes.get(B).waitRatio().getAsDouble(), 1e-12);
        assertEquals(25, c.all().steps());
        assertEquals(400.0 / 3000, c.all().waitRatio().getAsDouble(), 1e-12);
        assertEquals(250.0 / 1800, c.all().steadyWaitRatio().getAsDouble(), 1e-12);

        var json = c.toJson();
        assertEquals(25L, json.get("steps_reported"));
        assertEquals(400.0 / 3000, (Double) json.get("wait_ratio"), 1e-12);
        @SuppressWarnings("unchecked") var jsonRanks = (List<Map<String, Object>>) json.get("ranks");
        assertEquals(List.of(0, 1, 2, 3), jsonRanks.stream().map(m -> m.get("rank")).toList());
        assertEquals(List.of(B), jsonRanks.get(2).get("nodes"));
        assertNull(jsonRanks.get(3).get("wait_ratio"));
        @SuppressWarnings("unchecked") var jsonNodes = (List<Map<String, Object>>) json.get("nodes");
        assertEquals(List.of(A, B), jsonNodes.stream().map(m -> m.get("node")).toList());
        assertEquals(List.of(2, 3), jsonNodes.get(1).get("ranks"));
        assertEquals(0L, json.get("refused_reports"));
    }

    @Test
    void aLaterReportReplacesTheNodesFiguresAndARankMovedToAnotherNodeAddsUp() {
        var c = fourRanks();
        assertNull(c.offer(A, from(A, t(0, 4, 100, 300, 0, 100))));
        assertNull(c.offer(A, from(A, t(0, 6, 200, 400, 100, 200))));
        assertEquals(6, c.ranks().get(0).steps(), "totals, not increments: the later report replaces the earlier");
        // node A died; rank 0's trainer resumed on B, whose ledger counts from zero
        c.served(0, B);
        assertNull(c.offer(B, from(B, t(0, 2, 50, 350, 0, 0))));
        var r0 = c.ranks().get(0);
        assertEquals(8, r0.steps());
        assertEquals(250.0 / 1000, r0.waitRatio().getAsDouble(), 1e-12);
        @SuppressWarnings("unchecked") var jsonRanks = (List<Map<String, Object>>) c.toJson().get("ranks");
        assertEquals(List.of(A, B), jsonRanks.getFirst().get("nodes"));
    }

    /**
     * A node started again at the same address (a new incarnation, after its old self was removed) reports its ranks'
     * totals from zero: kept under its incarnation they are another node's figures, taken and added up, not the old one's
     * totals going down (refused); the old incarnation keeps its last. Keyed by address alone, the second report is refused.
     */
    @Test
    void aNodeStartedAgainAtItsAddressIsAnotherIncarnationWhoseTotalsStartFromZero() {
        String before = ClusterTimings.incarnation(A, 41), again = ClusterTimings.incarnation(A, -7);
        assertEquals(A, ClusterTimings.addressOf(before));
        assertEquals(A, ClusterTimings.addressOf(again));
        assertEquals(A, ClusterTimings.incarnation(A, 0), "no uid known: the address");
        var c = new ClusterTimings("j", 2);
        c.served(0, before);
        assertNull(c.offer(before, from(A, t(0, 10, 100, 900, 50, 650))));
        c.served(0, again);
        assertNull(c.offer(again, from(A, t(0, 2, 30, 170, 0, 0))), "the new incarnation's totals from zero are taken");
        assertEquals(12, c.ranks().get(0).steps(), "both incarnations' steps");
        assertEquals(130.0 / 1200, c.ranks().get(0).waitRatio().getAsDouble(), 1e-12);
        assertEquals(List.of(before, again).stream().sorted().toList(), List.copyOf(c.nodes().keySet()));
        assertNotNull(c.offer(again, from(B, t(0, 3, 30, 170, 0, 0))), "an incarnation of A answering as B is refused");
        @SuppressWarnings("unchecked") var jsonNodes = (List<Map<String, Object>>) c.toJson().get("nodes");
        assertEquals(List.of(A, A), jsonNodes.stream().map(m -> m.get("node")).toList(), "the address, once per incarnation");
        assertEquals(java.util.Set.of(41L, -7L), jsonNodes.stream().map(m -> m.get("incarnation")).collect(java.util.stream.Collectors.toSet()));
        @SuppressWarnings("unchecked") var jsonRanks = (List<Map<String, Object>>) c.toJson().get("ranks");
        assertEquals(List.of(A), jsonRanks.getFirst().get("nodes"));

        var byAddress = new ClusterTimings("j", 2); // what keying by address did: the restarted node's totals read as going down
        byAddress.served(0, A);
        assertNull(byAddress.offer(A, from(A, t(0, 10, 100, 900, 50, 650))));
        assertTrue(byAddress.offer(A, from(A, t(0, 2, 30, 170, 0, 0))).contains("went down"));
    }

    @Test
    void badReportsAreRefusedWholeAndTheEarlierFiguresStay() {
        var c = fourRanks();
        assertNull(c.offer(A, from(A, t(0, 10, 100, 900, 50, 650))));
        var bad = new ArrayList<NodeProtocol.NodeTimings>();
        bad.add(null);
        bad.add(new NodeProtocol.NodeTimings(A, "j", null));
        bad.add(from(B, t(0, 11, 100, 1000, 50, 700))); // answers as another node
        bad.add(new NodeProtocol.NodeTimings(A, "other", List.of(t(0, 11, 100, 1000, 50, 700)))); // another job
        bad.add(from(A, t(0, 11, 100, 1000, 50, 700), t(1, 1, 1, 1, 0, 0), t(1, 1, 1, 1, 0, 0), t(0, 1, 1, 1, 0, 0),
                t(1, 1, 1, 1, 0, 0))); // more entries than the world has ranks
        bad.add(from(A, t(4, 1, 1, 1, 0, 0))); // outside the world
        bad.add(from(A, t(-1, 1, 1, 1, 0, 0)));
        bad.add(from(A, t(1, 1, 1, 1, 0, 0), t(1, 2, 2, 2, 0, 0))); // twice
        bad.add(from(A, t(0, 11, 100, 1000, 50, 700), t(2, 1, 1, 1, 0, 0))); // rank 2 is B's: never asked for by A
        bad.add(from(A, t(0, -1, 100, 1000, 50, 700))); // negative
        bad.add(from(A, t(0, 11, -100, 1000, 0, 700)));
        bad.add(from(A, t(0, 11, 100, ClusterTimings.MAX_NANOS + 1, 50, 700))); // absurd
        bad.add(from(A, t(0, ClusterTimings.MAX_STEPS + 1, 100, 1000, 50, 700)));
        bad.add(from(A, t(0, 11, 100, 1000, 150, 700))); // steady above the whole run
        bad.add(from(A, t(1, 0, 5, 0, 0, 0))); // time without a step
        bad.add(from(A, t(0, 9, 100, 1000, 50, 700))); // steps went down
        bad.add(from(A, t(0, 11, 99, 1000, 50, 700))); // wait went down
        bad.add(from(A, t(0, 11, 100, 1000, 50, 600))); // steady compute went down
        bad.add(new NodeProtocol.NodeTimings(A, "j", java.util.Arrays.asList((NodeProtocol.RankTiming) null))); // an empty entry
        for (var report : bad) {
            var before = c.toJson();
            String why = c.offer(A, report);
            assertNotNull(why, "refused: " + report);
            var after = c.toJson();
            assertEquals(before.get("ranks"), after.get("ranks"), "the earlier figures stay after " + report);
            assertEquals(before.get("nodes"), after.get("nodes"));
        }
        assertEquals(bad.size(), c.refused());
        assertEquals(bad.size(), (long) (Long) c.toJson().get("refused_reports"));
        @SuppressWarnings("unchecked") var refusals = (Map<String, String>) c.toJson().get("refusals");
        assertEquals(List.of(A), List.copyOf(refusals.keySet()), "each refusal is under the node asked");
        assertEquals(10, c.ranks().get(0).steps());
        assertNull(c.offer(A, from(A, t(0, 11, 100, 1000, 50, 700))), "an honest report after them is taken");
        assertEquals(11, c.ranks().get(0).steps());
    }

    @Test
    void theVerdictUsesEveryRankAndNamesTheNodeWhoseRanksWaitMost() {
        var c = fourRanks();
        assertEquals(BottleneckVerdict.Kind.BALANCED, c.verdict().kind(), "nothing measured yet");
        // node A's ranks barely wait, B's wait a third of their steady steps: together above 0.05
        assertNull(c.offer(A, from(A, t(0, 10, 10, 990, 5, 795), t(1, 10, 10, 990, 5, 795))));
        assertNull(c.offer(B, from(B, t(2, 10, 500, 1000, 300, 600))));
        var v = c.verdict();
        assertEquals(BottleneckVerdict.Kind.DATA_BOUND, v.kind(), v.text());
        assertEquals("data", v.stage());
        assertEquals(310.0 / 2500, v.figures().get("trainer_wait_ratio"), 1e-12, "the steady ratio over all ranks");
        assertTrue(v.evidence().contains("3 of 4 ranks measured on 2 nodes"), v.evidence());
        assertTrue(v.evidence().contains("ranks on " + B + " wait most (0.333), on " + A + " least (0.006)"), v.evidence());
        // the same ranks, B's waits gone: at most 0.05 over all ranks is trainer-bound
        var quiet = fourRanks();
        assertNull(quiet.offer(A, from(A, t(0, 10, 10, 990, 5, 795))));
        assertNull(quiet.offer(B, from(B, t(2, 10, 40, 960, 40, 760))));
        assertEquals(45.0 / 1600, quiet.verdict().figures().get("trainer_wait_ratio"), 1e-12);
        assertEquals(BottleneckVerdict.Kind.TRAINER_BOUND, quiet.verdict().kind(), quiet.verdict().text());
    }

    @Test
    void theStatusLinesWaitIsOverTheStepsBetweenTwoReadings() {
        var before = new ClusterTimings.Figures(10, 900, 100, 0, 0);
        assertEquals(0.5, ClusterTimings.waitRatioBetween(before, new ClusterTimings.Figures(12, 1000, 200, 0, 0)).getAsDouble(), 1e-12);
        assertTrue(ClusterTimings.waitRatioBetween(before, before).isEmpty(), "no step in between");
        assertTrue(ClusterTimings.waitRatioBetween(new ClusterTimings.Figures(12, 1000, 200, 0, 0), before).isEmpty(), "never negative");
    }

    @Test
    void aRanksStepsCannotAddUpToMoreTimeThanTheJobHasRun() {
        long[] now = {1_000};
        var c = new ClusterTimings("j", 1, () -> now[0]);
        c.served(0, A);
        long allowed = ClusterTimings.CLOCK_SLACK_NANOS;
        assertNull(c.offer(A, from(A, t(0, 2, allowed / 2, allowed / 2, 0, 0))), "within the slack of a job just opened");
        assertNotNull(c.offer(A, from(A, t(0, 3, allowed / 2, allowed / 2 + 1, 0, 0))), "one ns beyond it");
        now[0] += 5_000;
        assertNull(c.offer(A, from(A, t(0, 3, allowed / 2, allowed / 2 + 5_000, 0, 0))), "the job has run 5 us more");
    }

    @Test
    void aRankIsServedByBoundedNodes() {
        var c = new ClusterTimings("j", 1);
        for (int i = 0; i < ClusterTimings.MAX_NODES_PER_RANK + 10; i++) c.served(0, "n" + i);
        c.served(5, A); // outside the world: ignored
        assertNull(c.offer("n0", new NodeProtocol.NodeTimings("n0", "j", List.of(t(0, 1, 1, 1, 0, 0)))));
        String last = "n" + (ClusterTimings.MAX_NODES_PER_RANK + 5);
        assertNotNull(c.offer(last, new NodeProtocol.NodeTimings(last, "j", List.of(t(0, 1, 1, 1, 0, 0)))));
    }
}
