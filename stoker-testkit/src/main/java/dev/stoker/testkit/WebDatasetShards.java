package dev.stoker.testkit;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import org.apache.commons.compress.archivers.tar.TarArchiveEntry;
import org.apache.commons.compress.archivers.tar.TarArchiveOutputStream;

/**
 * A JSON Lines data set written again as WebDataset tar shards, so that a test can read the same samples in both
 * formats and compare what comes out: sample i's key is {@code 0000i}, its line verbatim the member {@code key.json},
 * its one image {@code key.<ext>} or its several {@code key.0.<ext>}, {@code key.1.<ext>}, …, written in reverse
 * order (a reader must take them by number, not by position in the tar).
 */
public final class WebDatasetShards {
    private WebDatasetShards() {}

    /**
     * Writes the samples of {@code jsonl} (images relative to its folder) as {@code dir/shard-000.tar}, … of
     * {@code perShard} samples each; returns the number of shards.
     */
    public static int write(Path jsonl, Path dir, int perShard) throws IOException {
        var mapper = new ObjectMapper();
        var lines = Files.readAllLines(jsonl).stream().filter(l -> !l.isBlank()).toList();
        int shards = 0;
        for (int from = 0; from < lines.size(); from += perShard, shards++) {
            try (OutputStream out = Files.newOutputStream(dir.resolve(String.format("shard-%03d.tar", shards)));
                 var tar = new TarArchiveOutputStream(out, "UTF-8")) {
                for (int i = from; i < Math.min(lines.size(), from + perShard); i++) {
                    String key = String.format("%05d", i);
                    var node = mapper.readTree(lines.get(i));
                    var refs = new ArrayList<String>();
                    var image = node.get("image");
                    if (image != null && image.isArray()) image.forEach(n -> refs.add(n.asText()));
                    else if (image != null) refs.add(image.asText());
                    put(tar, key + ".json", lines.get(i).getBytes(StandardCharsets.UTF_8));
                    for (int k = refs.size() - 1; k >= 0; k--) {
                        String ref = refs.get(k);
                        String ext = ref.substring(ref.lastIndexOf('.') + 1);
                        put(tar, key + (refs.size() == 1 ? "" : "." + k) + "." + ext, Files.readAllBytes(jsonl.resolveSibling(ref)));
                    }
                }
            }
        }
        return shards;
    }

    /** The URI pattern of {@code shards} shards {@link #write} made in {@code dir}: {@code dir/shard-{000..NNN}.tar}. */
    public static String pattern(Path dir, int shards) {
        return dir.resolve(String.format("shard-{000..%03d}.tar", shards - 1)).toString();
    }

    /** Adds the file {@code name} holding {@code bytes} to {@code tar}. */
    public static void put(TarArchiveOutputStream tar, String name, byte[] bytes) throws IOException {
        var e = new TarArchiveEntry(name);
        e.setSize(bytes.length);
        tar.putArchiveEntry(e);
        tar.write(bytes);
        tar.closeArchiveEntry();
    }
}
