package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.node.NodeConfig;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * One configuration for the command line and config files: {@code serve --config F.yaml --print-config}
 * prints what the same options given as flags print; the defaults printed are {@link NodeConfig}'s; flags
 * override the file; a key that is no option of the command, or an option that means something else
 * there, is refused. Nothing is started: {@code --print-config} exits after printing.
 */
@Timeout(60)
class ConfigCliTest {
    @TempDir Path tmp;

    /** serve's options as flags and the same as YAML: a list option, a flag, a size with a suffix, an enum, a path. */
    static final List<String[]> SETTINGS = List.of(
            new String[] {"data", "s3://bucket/ds/train.jsonl"}, new String[] {"ranks", "4"}, new String[] {"batch", "2"},
            new String[] {"processor", "qwen3-vl"}, new String[] {"max-pixels", "200704"}, new String[] {"pixel-format", "uint8"},
            new String[] {"shm-budget", "3G"}, new String[] {"on-error", "fail"}, new String[] {"s3-path-style", "true"},
            new String[] {"errors-file", "/tmp/run dir/errors.jsonl"}, new String[] {"join", "127.0.0.1:2551,127.0.0.1:2552"},
            new String[] {"nodes", "2"}, new String[] {"placement", "pack"});

    static List<String> flags() {
        var out = new ArrayList<String>();
        for (String[] kv : SETTINGS) {
            out.add("--" + kv[0]);
            out.add(kv[1]);
        }
        return out;
    }

    Path yaml(String name) throws Exception {
        var text = new StringBuilder();
        for (String[] kv : SETTINGS) {
            String v = kv[0].equals("join") ? "[" + String.join(", ", List.of(kv[1].split(",")).stream().map(s -> "\"" + s + "\"").toList()) + "]"
                    : kv[1].contains(" ") || kv[1].contains(":") ? "\"" + kv[1] + "\"" : kv[1];
            text.append(kv[0]).append(": ").append(v).append('\n');
        }
        return Files.writeString(tmp.resolve(name), text);
    }

    static CliRunner run(List<String> args) { return CliRunner.run(args.toArray(String[]::new)); }

    @Test
    void aConfigFileMeansWhatTheSameFlagsMean() throws Exception {
        var args = new ArrayList<>(List.of("serve"));
        args.addAll(flags());
        args.add("--print-config");
        var fromFlags = run(args);
        assertEquals(0, fromFlags.status(), fromFlags.err());
        var fromFile = CliRunner.run("serve", "--config", yaml("serve.yaml").toString(), "--print-config");
        assertEquals(0, fromFile.status(), fromFile.err());
        assertEquals(fromFlags.out(), fromFile.out());
        assertTrue(fromFlags.out().contains("\nshm-budget: 3221225472\n"), fromFlags.out());
        assertTrue(fromFlags.out().contains("\njoin: [\"127.0.0.1:2551\", \"127.0.0.1:2552\"]\n"), fromFlags.out());
        // the printed text, fed back, prints itself
        Path printed = Files.writeString(tmp.resolve("printed.yaml"), fromFile.out());
        var again = CliRunner.run("serve", "--config", printed.toString(), "--print-config");
        assertEquals(fromFile.out(), again.out(), again.err());
    }

    @Test
    void theDefaultsPrintedAreTheNodeConfigDefaults() {
        var r = CliRunner.run("serve", "--data", "ds/train.jsonl", "--print-config");
        assertEquals(0, r.status(), r.err());
        assertEquals(NodeConfig.builder().data("ds/train.jsonl").build().toYaml(NodeConfig.keys()), r.out());
        for (String line : List.of("# seed: 1234  (default)", "# fetch-concurrency: 64  (default)", "# warm-up-ms: 3000  (default)", "# autotune: \"on\"  (default)",
                "# mode: zero-copy  (default)", "data: ds/train.jsonl"))
            assertTrue(r.out().lines().anyMatch(line::equals), line + " in\n" + r.out());
    }

    @Test
    void optionsOnTheCommandLineOverrideTheFile() throws Exception {
        var r = CliRunner.run("serve", "--config", yaml("o.yaml").toString(), "--ranks", "6", "--print-config");
        assertEquals(0, r.status(), r.err());
        assertTrue(r.out().contains("\nranks: 6\n"), r.out());
        assertTrue(r.out().contains("\nbatch: 2\n"), r.out());
    }

    @Test
    void aBenchmarkPrintsItsOwnOptionsAfterTheFeedsAndReadsThemBack() throws Exception {
        var r = CliRunner.run("bench", "ladder", "--data", "d.jsonl", "--steps", "5", "--modes", "prefetch,zero-copy", "--print-config");
        assertEquals(0, r.status(), r.err());
        assertTrue(r.out().contains("\nsteps: 5\n") && r.out().contains("\nmodes: [prefetch, zero-copy]\n"), r.out());
        assertTrue(r.out().contains("# step-ms: 250  (default)"), r.out());
        Path printed = Files.writeString(tmp.resolve("ladder.yaml"), r.out());
        var again = CliRunner.run("bench", "ladder", "--config", printed.toString(), "--print-config");
        assertEquals(r.out(), again.out(), again.err());
    }

    @Test
    void aKeyThatIsNoOptionOfTheCommandIsRefused() throws Exception {
        Path typo = Files.writeString(tmp.resolve("typo.yaml"), "data: d.jsonl\nrank: 2\n");
        var r = CliRunner.run("serve", "--config", typo.toString(), "--print-config");
        assertEquals(2, r.status(), r.out());
        assertTrue(r.err().contains("rank is not an option of stoker serve"), r.err());
        Path feed = Files.writeString(tmp.resolve("feed.yaml"), "join: \"127.0.0.1:1\"\ndata: d.jsonl\n");
        var node = CliRunner.run("node", "--config", feed.toString(), "--print-config");
        assertEquals(2, node.status(), node.out());
        assertTrue(node.err().contains("data is not an option of stoker node"), node.err());
    }

    @Test
    void oneNameMeansOneThing() {
        var node = CliRunner.run("node", "--join", "127.0.0.1:2551", "--print-config");
        assertEquals(0, node.status(), node.err());
        assertTrue(node.out().contains("join: [\"127.0.0.1:2551\"]"), node.out());
        assertFalse(node.out().contains("seed"), "the node has no shuffle seed: " + node.out());
        var seed = CliRunner.run("node", "--seed", "127.0.0.1:2551");
        assertEquals(2, seed.status());
        assertTrue(seed.err().contains("--seed"), seed.err());
        var bad = CliRunner.run("serve", "--data", "d.jsonl", "--ranks", "0", "--print-config");
        assertEquals(2, bad.status());
        assertEquals("stoker: --ranks: must be between 1 and 65536, got 0", bad.err().strip());
    }

    @Test
    void serveRefusesAWildcardWithoutATokenBeforeStartingAnything() throws Exception {
        Path data = tmp.resolve("missing.jsonl"); // never read: the endpoint is refused first
        var r = CliRunner.run("serve", "--data", data.toString(), "--socket", tmp.resolve("s.sock").toString(), "--flight", "0.0.0.0:0");
        assertEquals(2, r.status(), r.err());
        String err = r.err().strip();
        assertEquals(1, err.lines().count(), err);
        assertTrue(err.startsWith("stoker: --flight 0.0.0.0:0 can be reached from other hosts, so it needs a token"), err);
        assertFalse(Files.exists(tmp.resolve("s.sock")), "nothing started");
        var orphan = CliRunner.run("serve", "--data", data.toString(), "--flight-token-file", tmp.resolve("t").toString());
        assertEquals(2, orphan.status(), orphan.err());
        assertTrue(orphan.err().contains("need --flight"), orphan.err());
    }

    /** Every option's help prints as written: a '%' in a setting's doc (--weight's name%50) is no format directive. */
    @Test
    void theHelpPrintsEveryDocAsWrittenWithoutAFormattingWarning() {
        var err = new java.io.ByteArrayOutputStream();
        var before = System.err;
        System.setErr(new java.io.PrintStream(err, true));
        CliRunner r;
        try {
            r = CliRunner.run("serve", "--help");
        } finally {
            System.setErr(before);
        }
        assertEquals(0, r.status(), r.err());
        assertTrue(r.out().contains("name%50"), r.out());
        assertFalse(err.toString().contains("Could not format"), err.toString());
    }
}
