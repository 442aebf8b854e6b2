package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code stoker launch}'s world and its refusals, in-process: the node's ranks, the conflicts with
 * {@code --ranks}/{@code --local-ranks}, {@code --print-config} and the help text. How the world is read from the options
 * and SLURM's variables is {@code JobWorldTest}'s (stoker-node); the processes launch runs are
 * {@code JobLauncherTest}'s and stoker-system-tests' ({@code LaunchTest}, {@code TorchTrainingTest}).
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class LaunchCliTest {
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
