package dev.stoker.pipeline.validate;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.pipeline.EncodeOptions;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The token length of every record of a source under one set of processor settings, for packing: written by
 * {@code stoker validate}, read by whatever packs samples into sequences.
 *
 * <p>File {@code lengths-<key>.bin}, {@code key} the first 16 bytes (hex) of SHA-256 over the manifest's digest and
 * the settings that decide a length ({@link #settings}). Little-endian:
 * <pre>
 *   8 bytes   magic "STKLEN01"
 *   u32       H, the header's length in bytes
 *   H bytes   UTF-8 JSON {"key", "source", "digest", "records", "settings": {...}}, padded with spaces so that the
 *             lengths start at a multiple of 8 bytes
 *   records × i32   per record, in the source's order: its input_ids length when the feed keeps it,
 *                   {@value #ERROR} when it is an error, {@value #FILTERED} when a limit filters it
 * </pre>
 * With NumPy: {@code np.fromfile(f, "<i4", offset=12 + H)}.
 *
 * @param key      the settings' and manifest's hash, as in the file's name
 * @param source   the source's short name
 * @param digest   the source's digest (hex)
 * @param settings what decided the lengths (processor, pixel bounds, EXIF, limits, tokenizer)
 * @param lengths  one entry per record
 */
public record LengthIndex(String key, String source, String digest, Map<String, Object> settings, int[] lengths) {
    public static final byte[] MAGIC = "STKLEN01".getBytes(StandardCharsets.US_ASCII);
    /** The entry of a record the feed skips as an error. */
    public static final int ERROR = 0;
    /** The entry of a record a limit the user set filters (over --max-seq-len, over --max-images). */
    public static final int FILTERED = -1;

    private static final ObjectMapper JSON = new ObjectMapper();

    public LengthIndex {
        settings = java.util.Collections.unmodifiableMap(new LinkedHashMap<>(settings));
    }

    /**
     * What decides a record's length or verdict: the processor, its pixel bounds, the EXIF policy, the source-pixel,
     * sequence and image limits, the truncation policy, the tokenizer ({@code tokenizer}: "bundled" or its file's digest) and,
     * where the model's own renders, the chat template's digest.
     */
    public static Map<String, Object> settings(EncodeOptions o, String tokenizer) {
        var m = new LinkedHashMap<String, Object>();
        m.put("processor", o.preset().cliName());
        m.put("min_pixels", o.vision().minPixels());
        m.put("max_pixels", o.vision().maxPixels());
        m.put("exif", o.exif().name().toLowerCase(java.util.Locale.ROOT));
        m.put("max_source_pixels", o.maxSourcePixels());
        m.put("max_seq_len", o.maxSequenceLength());
        m.put("truncation", o.truncation().name().toLowerCase(java.util.Locale.ROOT));
        m.put("max_images", o.maxImages());
        m.put("tokenizer", tokenizer);
        if (o.chatTemplate() != null) m.put("chat_template", o.chatTemplateSha256()); // the model's own; the built-in one leaves the key as it was
        return m;
    }

    /** The key of {@code digest} (the source's, hex) under {@code settings}: 32 hex digits. */
    public static String key(String digest, Map<String, Object> settings) {
        try {
            var sha = MessageDigest.getInstance("SHA-256");
            sha.update(digest.getBytes(StandardCharsets.UTF_8));
            sha.update((byte) '\n');
            sha.update(JSON.writeValueAsBytes(settings));
            return HexFormat.of().formatHex(sha.digest(), 0, 16);
        } catch (NoSuchAlgorithmException | IOException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The file an index of {@code digest} under {@code settings} is kept in, in {@code dir}. */
    public static Path fileFor(Path dir, String digest, Map<String, Object> settings) {
        return dir.resolve("lengths-" + key(digest, settings) + ".bin");
    }

    /** An index of {@code lengths} keyed by {@code digest} and {@code settings}. */
    public static LengthIndex of(String source, String digest, Map<String, Object> settings, int[] lengths) {
        return new LengthIndex(key(digest, settings), source, digest, settings, lengths);
    }

    /** Writes this index as {@code dir/lengths-<key>.bin} (atomically: a temporary file moved into place); returns the file. */
    public Path write(Path dir) throws IOException {
        Files.createDirectories(dir);
        Path file = dir.resolve("lengths-" + key + ".bin");
        var header = new LinkedHashMap<String, Object>();
        header.put("key", key);
        header.put("source", source);
        header.put("digest", digest);
        header.put("records", lengths.length);
        header.put("settings", settings);
        byte[] json = JSON.writeValueAsBytes(header);
        int padded = json.length + (8 - (MAGIC.length + 4 + json.length) % 8) % 8;
        var buf = ByteBuffer.allocate(MAGIC.length + 4 + padded + 4 * lengths.length).order(ByteOrder.LITTLE_ENDIAN);
        buf.put(MAGIC).putInt(padded).put(json);
        for (int i = json.length; i < padded; i++) buf.put((byte) ' ');
        buf.asIntBuffer().put(lengths);
        Path tmp = Files.createTempFile(dir, "lengths-", ".tmp");
        try {
            Files.write(tmp, buf.array());
            Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } finally {
            Files.deleteIfExists(tmp);
        }
        return file;
    }

    /** Reads an index written by {@link #write}; a file that is not one, or is cut short, is refused. */
    public static LengthIndex read(Path file) throws IOException {
        try (var ch = FileChannel.open(file, StandardOpenOption.READ)) {
            long size = ch.size();
            if (size < MAGIC.length + 4) throw new IOException(file + ": not a length index (" + size + " bytes)");
            var head = ByteBuffer.allocate(MAGIC.length + 4).order(ByteOrder.LITTLE_ENDIAN);
            readFully(ch, head, 0);
            byte[] magic = new byte[MAGIC.length];
            head.flip().get(magic);
            if (!java.util.Arrays.equals(magic, MAGIC)) throw new IOException(file + ": not a length index (bad magic)");
            int h = head.getInt();
            if (h < 2 || MAGIC.length + 4L + h > size || h > 1 << 20) throw new IOException(file + ": length index header of " + h + " bytes is corrupt");
            var json = ByteBuffer.allocate(h);
            readFully(ch, json, MAGIC.length + 4);
            JsonNode header = JSON.readTree(new String(json.array(), StandardCharsets.UTF_8));
            long records = header.path("records").asLong(-1);
            long start = MAGIC.length + 4L + h;
            if (records < 0 || start + 4 * records != size)
                throw new IOException(file + ": length index says " + records + " records but holds " + (size - start) + " bytes of lengths");
            var data = ByteBuffer.allocate((int) (4 * records)).order(ByteOrder.LITTLE_ENDIAN);
            readFully(ch, data, start);
            int[] lengths = new int[(int) records];
            data.flip().asIntBuffer().get(lengths);
            @SuppressWarnings("unchecked")
            Map<String, Object> settings = JSON.convertValue(header.path("settings"), LinkedHashMap.class);
            return new LengthIndex(header.path("key").asText(), header.path("source").asText(), header.path("digest").asText(),
                    settings, lengths);
        }
    }

    private static void readFully(FileChannel ch, ByteBuffer buf, long at) throws IOException {
        while (buf.hasRemaining()) {
            int n = ch.read(buf, at + buf.position());
            if (n < 0) throw new IOException("length index cut short");
        }
    }
}
