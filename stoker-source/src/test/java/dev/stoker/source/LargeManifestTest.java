package dev.stoker.source;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A manifest larger than {@link SourceConfig#maxObjectBytes()} is served (audit #12: the manifest was fetched whole and
 * capped at 256 MiB, so a large SFT manifest could not be served at all): it is indexed as a stream and each record read
 * where it lies, so the limit bounds one record, not the manifest. Scaled down: a 64 KiB limit, a manifest of about 1 MB.
 */
@Timeout(60)
class LargeManifestTest {
    @TempDir
    Path dir;

    @Test
    void aManifestOverTheObjectLimitIsIndexedAndEveryRecordRead() throws Exception {
        int n = 20_000;
        var text = new StringBuilder();
        for (int i = 0; i < n; i++) text.append("{\"id\":\"r").append(i).append("\",\"image\":\"a.png\",\"text\":\"record ").append(i).append("\"}\n");
        Path manifest = Files.writeString(dir.resolve("train.jsonl"), text);
        long limit = 64 * 1024;
        assertTrue(Files.size(manifest) > 10 * limit, "the manifest is over the limit: " + Files.size(manifest));
        try (var source = ObjectSources.open(manifest.toString(), SourceConfig.builder().maxObjectBytes(limit).build())) {
            var records = ManifestRecords.open(source, "train.jsonl", null);
            assertEquals(n, records.size());
            for (int i : new int[] {0, 1, n / 2, n - 1}) {
                String got = new String(TestData.get(records.read(i)), StandardCharsets.UTF_8);
                assertEquals("{\"id\":\"r" + i + "\",\"image\":\"a.png\",\"text\":\"record " + i + "\"}", got);
            }
        }
    }
}
