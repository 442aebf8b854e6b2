package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.node.ConfigException;
import dev.stoker.pipeline.feed.RankRange;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code stoker launch}'s world and its refusals, in-process: options over SLURM's variables, the node's ranks, the
 * conflicts with {@code --ranks}/{@code --local-ranks}, {@code --print-config} and the help text. The processes it
 * runs are stoker-system-tests' ({@code LaunchTest}, {@code TorchTrainingTest}).
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class LaunchCliTest {
    @Test
    void theWorldComesFromTheOptionsElseSlurmElseTheDefaults() {
        var w = LaunchCommand.World.resolve(2, 1, 4, Map.of());
        assertEquals(8, w.ranks());
        assertEquals(new RankRange(4, 7), w.local());
        var slurm = Map.of("SLURM_NNODES", "3", "SLURM_NODEID", "2", "SLURM_NTASKS_PER_NODE", "2(x3)", "SLURM_GPUS_ON_NODE", "8");
        w = LaunchCommand.World.resolve(null, null, null, slurm);
        assertEquals(6, w.ranks());
        assertEquals(new RankRange(4, 5), w.local());
        assertEquals("--nnodes 3 from $SLURM_NNODES, --node-rank 2 from $SLURM_NODEID, --nproc-per-node 2 from $SLURM_NTASKS_PER_NODE",
                w.how());
        w = LaunchCommand.World.resolve(null, 0, null, Map.of("SLURM_NNODES", "2", "SLURM_NODEID", "1", "SLURM_GPUS_ON_NODE", "4"));
        assertEquals(new RankRange(0, 3), w.local(), "--node-rank given wins over $SLURM_NODEID; the GPUs give the ranks per node");
        assertEquals(8, w.ranks());
        w = LaunchCommand.World.resolve(null, null, 3, Map.of());
        assertEquals(3, w.ranks());
        assertEquals("--nnodes 1 (default), --node-rank 0 (default), --nproc-per-node 3", w.how());
        assertNull(LaunchCommand.World.resolve(null, null, null, Map.of()), "no world: --ranks as for serve");
        var e = assertThrows(ConfigException.class, () -> LaunchCommand.World.resolve(2, null, null, Map.of()));
        assertTrue(e.getMessage().contains("--nproc-per-node is required"), e.getMessage());
        e = assertThrows(ConfigException.class, () -> LaunchCommand.World.resolve(2, 2, 1, Map.of()));
        assertTrue(e.getMessage().contains("--node-rank must be between 0 and 1 (--nnodes 2), got 2"), e.getMessage());
        e = assertThrows(ConfigException.class, () -> LaunchCommand.World.resolve(null, null, null, Map.of("SLURM_NNODES", "2",
                "SLURM_NTASKS_PER_NODE", "many")));
        assertTrue(e.getMessage().contains("$SLURM_NTASKS_PER_NODE is 'many', not a number"), e.getMessage());
    }

    @Test
    void printConfigShowsTheWorldsRanksAndThisNodesShare() {
        var r = CliRunner.run("launch", "--data", "ds/train.jsonl", "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2",
                "--print-config");
        assertEquals(0, r.status(), r.err());
        assertTrue(r.out().contains("\nranks: 4\n"), r.out());
        assertTrue(r.out().contains("\nlocal-ranks: \"2-3\"\n"), r.out());
        r = CliRunner.run("launch", "--data", "ds/train.jsonl", "--nnodes", "1", "--nproc-per-node", "2", "--print-config");
        assertTrue(r.out().contains("\nranks: 2\n") && r.out().contains("# local-ranks: (default: all of --ranks)"), r.out());
    }

    @Test
    void aConfigFileGivesLaunchsOptionsAndServesAlike(@TempDir Path tmp) throws Exception {
        Path file = tmp.resolve("launch.yaml");
        Files.writeString(file, "data: ds/train.jsonl\nbatch: 4\nnnodes: 2\nnode-rank: 1\nnproc-per-node: 3\n");
        var r = CliRunner.run("launch", "--config", file.toString(), "--print-config", "--", "true", "--config", "not-ours.yaml");
        assertEquals(0, r.status(), r.err());
        assertTrue(r.out().contains("\nranks: 6\n") && r.out().contains("\nlocal-ranks: \"3-5\"\n") && r.out().contains("\nbatch: 4\n"),
                r.out());
        r = CliRunner.run("launch", "--config", file.toString(), "--node-rank", "0", "--print-config");
        assertTrue(r.out().contains("\nlocal-ranks: \"0-2\"\n"), "the command line wins over the file: " + r.out());
    }

    @Test
    void ranksBesideTheWorldOptionsAreRefused() {
        var r = CliRunner.run("launch", "--data", "ds/train.jsonl", "--nproc-per-node", "2", "--ranks", "2", "--", "true");
        assertEquals(Main.EXIT_INVALID_INPUT, r.status());
        assertTrue(r.err().contains("give the world either as --nnodes/--node-rank/--nproc-per-node or as --ranks/--local-ranks, not both"),
                r.err());
        r = CliRunner.run("launch", "--data", "ds/train.jsonl", "--nproc-per-node", "2");
        assertEquals(Main.EXIT_INVALID_INPUT, r.status());
        assertTrue(r.err().contains("launch needs a COMMAND"), r.err());
        Assumptions.assumeTrue(System.getenv().keySet().stream().noneMatch(k -> k.startsWith("SLURM_")), "runs under SLURM");
        r = CliRunner.run("launch", "--data", "ds/train.jsonl", "--", "true");
        assertEquals(Main.EXIT_INVALID_INPUT, r.status());
        assertTrue(r.err().contains("--nproc-per-node is required"), r.err());
    }

    @Test
    void helpDocumentsTheWorldTheEnvironmentAndTheSignals() {
        var r = CliRunner.run("launch", "--help");
        assertEquals(0, r.status());
        for (String s : new String[] {"--nnodes", "--node-rank", "--nproc-per-node", "SLURM_NTASKS_PER_NODE", "STOKER_SOCKET", "STOKER_JOB",
                "SIGINT", "SIGTERM", "--ready-timeout", "--local-ranks", "--data", "--config", "128+N"})
            assertTrue(r.out().contains(s), s + " in " + r.out());
    }
}
