package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.testkit.SmallJpegDataset;
import dev.stoker.testkit.Vectors;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A packed job end to end: {@code stoker serve --pack-tokens N} (zero-copy, shared memory) read by the real Python client,
 * each rank's pack per step what {@code stoker plan --pack-tokens N} says; the pack's metadata (cu_seqlens, seg_ids,
 * max_seqlen, sample_index) in {@code last_meta}, the model inputs without attention_mask and with four position rows,
 * and {@code stoker.packing}'s FA2 adapter taking it as is; the next pack of a rank over Arrow Flight is the planned one too.
 */
@Tag("slow")
@Timeout(value = 240, unit = TimeUnit.SECONDS)
class PackedServeTest {
    static final int RANKS = 3, STEPS = 4;
    static final String PYTHON = PythonClientTest.PYTHON;
    @TempDir Path tmp;

    @Test
    void theServiceHandsEachRankThePlannedPackAndThePythonClientReadsIt() throws Exception {
        assumeTrue(Files.isExecutable(Path.of(PYTHON)), PYTHON + " is missing");
        Path data = SmallJpegDataset.write(tmp.resolve("ds"), 60, 11);
        String[] common = {"--data", data.toString(), "--ranks", "" + RANKS, "--pack-tokens", "1024", "--max-pixels", "50176",
                "--seed", "7", "--threads", "2"};
        var planArgs = new ArrayList<>(List.of("plan"));
        planArgs.addAll(List.of(common));
        planArgs.addAll(List.of("--steps", "" + (STEPS + 1)));
        var plan = CliRunner.run(planArgs.toArray(String[]::new));
        assertEquals(0, plan.status(), plan.err());
        var json = new ObjectMapper();
        Map<String, List<Long>> planned = new HashMap<>(); // "step/rank" -> samples in segment order (-1: dummy)
        for (String line : plan.out().lines().toList()) {
            JsonNode n = json.readTree(line);
            if (!n.has("segment")) continue;
            planned.computeIfAbsent(n.get("step").asInt() + "/" + n.get("rank").asInt(), k -> new ArrayList<>()).add(n.get("sample").asLong());
        }

        Path socket = tmp.resolve("packed.sock"), log = tmp.resolve("serve.log");
        var serveArgs = new ArrayList<>(List.of(common));
        serveArgs.addAll(List.of("--socket", socket.toString(), "--shm-dir", Files.createDirectories(tmp.resolve("shm")).toString(),
                "--shm-budget", "1G", "--warm-up-ms", "0", "--flight", "127.0.0.1:0"));
        Process serve = ServeProcess.start(log, "512m", serveArgs);
        try {
            ServeProcess.awaitListening(serve, log);
            Path script = tmp.resolve("read.py");
            Files.writeString(script, String.join("\n",
                    "import json, sys",
                    "import numpy as np",
                    "from stoker import Loader",
                    "from stoker.packing import for_hf_flash_attention, pack_info",
                    "sock, ranks, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])",
                    "loaders = [Loader(sock, r, ranks) for r in range(ranks)]",
                    "for step in range(steps):",
                    "    for r, loader in enumerate(loaders):",
                    "        batch = next(loader)",
                    "        meta = loader.last_meta",
                    "        assert 'attention_mask' not in batch, sorted(batch)",
                    "        ids, pos = batch['input_ids'], batch['position_ids']",
                    "        assert ids.shape[0] == 1 and pos.shape[:2] == (4, 1) and pos.shape[2] == ids.shape[1], (ids.shape, pos.shape)",
                    "        cu = meta.metadata['cu_seqlens']",
                    "        assert cu.dtype == np.int32 and cu[0] == 0 and cu[-1] <= ids.shape[1], cu",
                    "        fa2 = for_hf_flash_attention(batch, meta)",
                    "        assert 'attention_mask' not in fa2 and np.array_equal(np.asarray(fa2['cu_seq_lens_q'])[:len(cu)], cu), fa2.keys()",
                    "        info = pack_info(batch, meta)",
                    "        print(json.dumps({'step': step, 'rank': r, 'samples': [int(i) for i in meta.sample_index],",
                    "                          'segments': len(info.segments), 'T': int(ids.shape[1]), 'max': int(meta.metadata['max_seqlen'][0])}))",
                    "        del batch, fa2",
                    "for loader in loaders: loader.close()",
                    ""));
            var pb = new ProcessBuilder(PYTHON, script.toString(), socket.toString(), "" + RANKS, "" + STEPS).redirectErrorStream(true);
            pb.environment().put("PYTHONPATH", Vectors.projectDir().resolve("clients/python").toString());
            Process py = pb.start();
            py.getOutputStream().close();
            String out = new String(py.getInputStream().readAllBytes());
            assertTrue(py.waitFor(120, TimeUnit.SECONDS), out);
            assertEquals(0, py.exitValue(), out + "\n--- serve:\n" + Files.readString(log));
            int batches = 0;
            for (String line : out.lines().toList()) {
                JsonNode n = json.readTree(line);
                String key = n.get("step").asInt() + "/" + n.get("rank").asInt();
                var got = new ArrayList<Long>();
                n.get("samples").forEach(x -> got.add(x.asLong()));
                assertEquals(planned.get(key), got, "step/rank " + key + ": the planned pack, segment by segment");
                assertEquals(got.size(), n.get("segments").asInt(), key);
                assertTrue(n.get("max").asInt() > 0 && n.get("max").asInt() <= 1024 && n.get("T").asInt() <= 1024, line);
                batches++;
            }
            assertEquals(RANKS * STEPS, batches, out);

            // the next step's pack of rank 0 over Arrow Flight (the socket trainers said BYE): the planned one, with its metadata
            var m = java.util.regex.Pattern.compile("flight on grpc://127\\.0\\.0\\.1:(\\d+)").matcher(Files.readString(log));
            assertTrue(m.find(), Files.readString(log));
            try (var flight = dev.stoker.flight.FlightBatchClient.connect("127.0.0.1", Integer.parseInt(m.group(1)),
                    dev.stoker.node.FlightTokenFile.clientOptions(System.getenv()), null)) {
                var batch = flight.next(0, RANKS, "default");
                assertTrue(batch != null);
                var got = new ArrayList<Long>();
                for (long i : batch.tensor("sample_index").toLongs()) got.add(i);
                assertEquals(planned.get(STEPS + "/0"), got, "step " + STEPS + " rank 0 over Flight: the planned pack");
                int[] cu = batch.tensor("cu_seqlens").toInts();
                assertEquals(got.size() + 1, cu.length);
                assertEquals(4, batch.tensor("position_ids").shape()[0], "four position rows");
                assertEquals(1, batch.tensor("input_ids").shape()[0], "one row");
            }
        } finally {
            serve.destroy();
            assertTrue(serve.waitFor(30, TimeUnit.SECONDS));
        }
        assertEquals(0, serve.exitValue(), Files.readString(log));
    }
}
