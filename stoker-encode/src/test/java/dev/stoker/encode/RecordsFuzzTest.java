package dev.stoker.encode;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.code_intelligence.jazzer.junit.FuzzTest;
import dev.stoker.core.SampleException;
import dev.stoker.source.ManifestRecords;
import dev.stoker.text.ChatSample;
import dev.stoker.text.SampleParser;
import java.util.List;
import org.junit.jupiter.api.Timeout;

/**
 * Fuzzes the record path of a manifest as the feed runs it: {@link ManifestRecords} indexes the bytes (JSONL, or a
 * JSON array), each record is read back by its index entry and {@link SampleParser} turns it into a
 * {@link ChatSample} (LLaVA, ShareGPT, ms-swift and HF typed-message layouts; odd records as a source with two
 * embedded images would give them, as WebDataset and Parquet do).
 *
 * <p>The contract checked on every input: the index is built or refused with an {@link IllegalArgumentException}
 * with a message; every indexed record reads back (bytes inside the manifest); each record is a sample with an id whose
 * images are named, or a {@link SampleException} at stage MANIFEST with a sample id and a
 * message — never another exception, never a hang (each input's limit is the class's {@code @Timeout}).
 */
@Timeout(10)
class RecordsFuzzTest {
    private static final int MAX_RECORDS = 64;
    private static final List<String> EMBEDDED = List.of("embedded-0.jpg", "embedded-1.jpg");
    private static final SampleParser PARSER = new SampleParser();

    @FuzzTest(maxDuration = "10s")
    void records(byte[] manifest) {
        ManifestRecords records;
        try {
            records = ManifestRecords.inMemory("fuzz.jsonl", manifest);
        } catch (IllegalArgumentException refused) {
            assertNotNull(refused.getMessage(), "a refused manifest says why");
            return;
        }
        for (int i = 0; i < Math.min(records.size(), MAX_RECORDS); i++) {
            String id = records.id(i);
            byte[] json = records.record(i).join().json();
            assertTrue(json.length <= manifest.length, "record " + i + " of " + json.length + " bytes from " + manifest.length);
            ChatSample sample;
            try {
                sample = i % 2 == 0 ? PARSER.parseLine(json, id) : PARSER.parseRecord(json, id, EMBEDDED);
            } catch (SampleException refused) {
                assertEquals(SampleException.Stage.MANIFEST, refused.stage(), refused.getMessage());
                assertNotNull(refused.sampleId(), refused.getMessage());
                assertTrue(refused.getMessage() != null && !refused.getMessage().isBlank(), "a refusal says why");
                continue;
            }
            assertNotNull(sample.id());
            for (String image : sample.imagePaths()) assertNotNull(image, "an image named null: " + sample);
            if (i % 2 == 1) assertEquals(EMBEDDED, sample.imagePaths(), "embedded images take the record's places");
        }
    }
}
