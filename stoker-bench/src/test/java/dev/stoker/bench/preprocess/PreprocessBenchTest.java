package dev.stoker.bench.preprocess;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.node.ConfigException;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.source.mix.DataSources;
import dev.stoker.testkit.SmallJpegDataset;
import dev.stoker.testkit.WebDatasetShards;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code bench preprocess} reads a data set as serve and validate do: the same samples as JSON Lines with image files and
 * as WebDataset tar shards (images as members, several per sample) encode to the same tokens, images and pixels.
 */
@Timeout(120)
class PreprocessBenchTest {
    @TempDir Path tmp;

    private static NodeConfig config(String data) {
        return NodeConfig.builder().data(data).threads(2).pixels(3136, 50176).build();
    }

    private static Map<String, Object> run(String data, StringWriter text) throws Exception {
        return PreprocessBench.run(new PreprocessBench.Settings(config(data), 0, 0), new PrintWriter(text));
    }

    /** One timed pass of every sample of {@code data}, for the totals the JSON line leaves out (tokens, source pixels). */
    private static PreprocessBench.Result measure(String data) throws Exception {
        var config = config(data);
        try (var sources = DataSources.open(config.sources(), config.sourceConfig(), null);
             var tokenizer = NodeFeeds.tokenizer(null)) {
            var records = sources.feedSource().records();
            return PreprocessBench.measure(sources.feedSource(), records, records.size(), 2, config.encodeOptions(), tokenizer);
        }
    }

    @Test
    void webDatasetShardsGiveWhatTheSameJsonLinesGive() throws Exception {
        int n = 24;
        Path jsonl = SmallJpegDataset.write(tmp.resolve("ds"), n, 7);
        Path dir = Files.createDirectories(tmp.resolve("wds"));
        String shards = WebDatasetShards.pattern(dir, WebDatasetShards.write(jsonl, dir, 10));
        var lines = run(jsonl.toString(), new StringWriter());
        var text = new StringWriter();
        var tars = run(shards, text);
        assertEquals(n, tars.get("samples"), text.toString());
        assertEquals(0, tars.get("errors"), text.toString());
        assertEquals(lines.get("samples"), tars.get("samples"));
        assertEquals(lines.get("images"), tars.get("images"));
        assertTrue(text.toString().startsWith("data          " + shards + " (" + n + " samples timed, 0 warm-up)"), text.toString());

        var a = measure(jsonl.toString());
        var b = measure(shards);
        long refs = Files.readAllLines(jsonl).stream().mapToLong(l -> l.split("images/", -1).length - 1).sum();
        assertTrue(Files.readString(jsonl).contains("\"image\":[\""), "some samples carry two images (tar members key.0, key.1)");
        assertEquals(refs, a.images(), "every image of the data set decoded");
        assertEquals(a.tokens(), b.tokens(), "the same token counts");
        assertEquals(a.sourcePixels(), b.sourcePixels(), "the same images decoded");
    }

    @Test
    void dataThatCannotBeReadIsRefusedNamingIt() {
        String missing = tmp.resolve("none/train.jsonl").toString();
        var e = assertThrows(ConfigException.class, () -> run(missing, new StringWriter()));
        assertEquals("cannot read --data " + missing + ": file not found: " + missing, e.getMessage());
    }
}
