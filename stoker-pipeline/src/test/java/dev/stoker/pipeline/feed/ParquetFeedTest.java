package dev.stoker.pipeline.feed;

import static dev.stoker.parquet.HfParquet.image;
import static dev.stoker.parquet.HfParquet.map;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.Batch;
import dev.stoker.parquet.HfParquet;
import dev.stoker.parquet.ParquetRecords;
import dev.stoker.source.ObjectSources;
import dev.stoker.source.SourceConfig;
import dev.stoker.source.mix.FeedSource;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * The same samples as JSON Lines with image files beside them and as Parquet (Hugging Face layout) with the
 * images' bytes in the rows give the same batches, tensor for tensor, through the real Feeder.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class ParquetFeedTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final int N = 13, RANKS = 2, BATCH = 3, STEPS = 4;

    @TempDir Path tmp;

    static List<Batch> run(FeedSource source) throws Exception {
        var config = FeederTest.config(FeedMode.CONCURRENT, RANKS, BATCH, 2);
        try (var feeder = Feeder.start(config, source, SharedTokenizer.get())) {
            var out = new ArrayList<Batch>();
            for (int s = 0; s < STEPS; s++)
                for (int r = 0; r < RANKS; r++) out.add(feeder.rank(r).next().get(60, TimeUnit.SECONDS));
            return out;
        }
    }

    static List<Batch> feed(Path manifest) throws Exception {
        try (var objects = ObjectSources.open(manifest.toString(), SourceConfig.defaults())) {
            var source = FeedSource.of(objects, null);
            if (manifest.toString().endsWith(".parquet")) assertTrue(source.records() instanceof ParquetRecords, "read as Parquet");
            return run(source);
        }
    }

    static List<String> refs(JsonNode record) {
        var image = record.get("image");
        var out = new ArrayList<String>();
        if (image == null) return out;
        if (image.isTextual()) out.add(image.asText());
        else image.forEach(n -> out.add(n.asText()));
        return out;
    }

    static List<Object> images(Path dir, List<String> refs) throws Exception {
        var out = new ArrayList<Object>();
        for (String ref : refs) out.add(image(Files.readAllBytes(dir.resolve(ref)), ref));
        return out;
    }

    static void assertNoSkips(List<Batch> batches) {
        for (var b : batches) assertEquals(List.of(), b.skippedSamples(), "batch " + b.globalStep());
    }

    @Test
    void llavaConversationsFromJsonLinesAndParquetGiveTheSameTensors() throws Exception {
        Path jsonl = TestDatasets.write(tmp.resolve("jsonl"), N, Set.of());
        var rows = new ArrayList<Map<String, Object>>();
        for (String line : Files.readAllLines(jsonl)) {
            if (line.isBlank()) continue;
            var record = JSON.readTree(line);
            var conversations = new ArrayList<Object>();
            record.get("conversations").forEach(t -> conversations.add(map("from", t.get("from").asText(), "value", t.get("value").asText())));
            rows.add(map("id", record.get("id").asText(), "conversations", conversations, "images", images(jsonl.getParent(), refs(record))));
        }
        Path dir = Files.createDirectories(tmp.resolve("parquet")); // no image files here: the rows carry them
        HfParquet.write(dir.resolve("train.parquet"), HfParquet.CONVERSATIONS_IMAGES, rows, 4);
        var expected = feed(jsonl);
        assertNoSkips(expected);
        FeederTest.assertSameBatches(expected, feed(dir.resolve("train.parquet")), "Parquet vs JSON Lines (LLaVA)");
    }

    @Test
    void typedMessagesFromJsonLinesAndParquetGiveTheSameTensors() throws Exception {
        Path llava = TestDatasets.write(tmp.resolve("jsonl"), N, Set.of());
        var lines = new StringBuilder();
        var rows = new ArrayList<Map<String, Object>>();
        for (String line : Files.readAllLines(llava)) {
            if (line.isBlank()) continue;
            var record = JSON.readTree(line);
            var refs = refs(record);
            String question = record.at("/conversations/0/value").asText().replace("<image>\n", "");
            String answer = record.at("/conversations/1/value").asText();
            // JSON Lines: typed items naming their files; Parquet: bare {"type": "image"} items and the images column
            ObjectNode typed = JSON.createObjectNode().put("id", record.get("id").asText());
            var user = typed.putArray("messages").addObject().put("role", "user").putArray("content");
            var items = new ArrayList<Object>();
            for (String ref : refs) {
                user.addObject().put("type", "image").put("image", ref);
                items.add(map("type", "image"));
            }
            user.addObject().put("type", "text").put("text", question);
            items.add(map("type", "text", "text", question));
            ((com.fasterxml.jackson.databind.node.ArrayNode) typed.get("messages")).addObject().put("role", "assistant").put("content", answer);
            lines.append(JSON.writeValueAsString(typed)).append('\n');
            rows.add(map("id", record.get("id").asText(), "messages", List.of(map("role", "user", "content", items),
                    map("role", "assistant", "content", List.of(map("type", "text", "text", answer)))), "images", images(llava.getParent(), refs)));
        }
        Path jsonl = Files.writeString(llava.resolveSibling("typed.jsonl"), lines);
        Path dir = Files.createDirectories(tmp.resolve("parquet"));
        HfParquet.write(dir.resolve("typed-00000.parquet"), HfParquet.TYPED, rows.subList(0, 6), 2);
        HfParquet.write(dir.resolve("typed-00001.parquet"), HfParquet.TYPED, rows.subList(6, rows.size()), 3);
        var expected = feed(jsonl);
        assertNoSkips(expected);
        assertTrue(expected.stream().anyMatch(b -> b.pixelValues().length > 0), "images were encoded");
        FeederTest.assertSameBatches(expected, feed(dir.resolve("typed-*.parquet")), "Parquet vs JSON Lines (HF typed)");
    }
}
