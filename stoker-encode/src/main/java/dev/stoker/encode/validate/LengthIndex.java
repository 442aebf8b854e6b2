package dev.stoker.encode.validate;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.io.AtomicFiles;
import dev.stoker.encode.EncodeOptions;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The shape of every record of a source under one set of processor settings, for packing: its token length, each
 * image's patch count and each video's patch count and temporal groups, as the feed would make them, known without
 * decoding a pixel (videos are planned from their frame index, demuxed, never decoded). Written by
 * {@code stoker validate}, read by the pack planner ({@code dev.stoker.encode.validate.ShapeIndexes}).
 *
 * <p>File {@code lengths-<key>.bin}, {@code key} the first 16 bytes (hex) of SHA-256 over the manifest's digest and
 * the settings that decide a length ({@link #settings}). Little-endian, format 4:
 * <pre>
 *   8 bytes   magic "STKLEN04"
 *   u32       H, the header's length in bytes
 *   H bytes   UTF-8 JSON {"key", "source", "digest", "records", "images", "videos", "clips", "settings": {...}}, padded
 *             with spaces so that the table starts at a multiple of 8 bytes
 *   records × 5 × i32   per record, in the source's order: its input_ids length when the feed keeps it ({@value #ERROR}
 *                       when it is an error, {@value #FILTERED} when a limit filters it), the number of its images the
 *                       feed keeps (0 for an error or a filtered record), their patches together (Σ t·h·w), the
 *                       number of its videos the feed keeps and the number of its audio clips (both 0 for an error or a
 *                       filtered record)
 *   images × i32        per image kept, records in order and each record's images in the sample's order: its patch count
 *                       t·h·w, the rows of its pixel_values
 *   videos × 2 × i32    per video kept, records in order and each record's videos in the sample's order: its temporal
 *                       groups t (video_grid_thw's first column) and its patch count t·h·w, the rows of its
 *                       pixel_values_videos
 *   clips × i32         per clip, records in order and each record's clips in placeholder order (an audio family's,
 *                       issue 32): its log-mel frames as the job's --audio-pad makes them (SampleShape.clipFrames), the
 *                       width of its input_features row
 * </pre>
 * With NumPy: {@code rec = np.fromfile(f, "<i4", count=4 * records, offset=12 + H).reshape(-1, 4)} (columns tokens,
 * images, image patches, videos), {@code per_image = np.fromfile(f, "<i4", count=images, offset=12 + H + 16 * records)}
 * and {@code per_video = np.fromfile(f, "<i4", offset=12 + H + 16 * records + 4 * images).reshape(-1, 2)}; record i's
 * images at {@code per_image[s[i]:s[i + 1]]} with {@code s = np.concatenate([[0], np.cumsum(rec[:, 1])])}, its
 * videos likewise by {@code rec[:, 3]}.
 *
 * <p>Older formats: format 3 ({@code STKLEN03}: records × 4 × i32, no clip column nor table, written before audio
 * packs) is read as an index without clips; format 2 ({@code STKLEN02}: records × 3 × i32, no video column nor table, written before video)
 * is read as an index without videos, which it is (its writer refused every video record); format 1
 * ({@code STKLEN01}: lengths only) is refused with a request to re-run {@code stoker validate}.
 *
 * @param key          the settings' and manifest's hash, as in the file's name
 * @param source       the source's short name
 * @param digest       the source's digest (hex)
 * @param settings     what decided the lengths (processor, pixel bounds, EXIF, limits, tokenizer)
 * @param lengths      one entry per record
 * @param imageStart   records + 1 offsets into {@code imagePatches}: record i's images are
 *                     {@code [imageStart[i], imageStart[i + 1])}
 * @param imagePatches every kept image's patch count, records in order
 * @param videoStart   records + 1 offsets into {@code videoPatches} and {@code videoGroups}: record i's videos are
 *                     {@code [videoStart[i], videoStart[i + 1])}
 * @param videoPatches every kept video's patch count t·h·w, records in order
 * @param videoGroups  every kept video's temporal groups t, records in order
 * @param clipStart    records + 1 offsets into {@code clipFrames}: record i's clips are {@code [clipStart[i], clipStart[i + 1])}
 * @param clipFrames   every kept record's clips' frames, records in order (an audio family's; empty otherwise)
 */
public record LengthIndex(String key, String source, String digest, Map<String, Object> settings, int[] lengths, int[] imageStart,
                          int[] imagePatches, int[] videoStart, int[] videoPatches, int[] videoGroups, int[] clipStart,
                          int[] clipFrames) {
    /**
     * The rules on what a record may hold, by version: 2 refuses media Stoker does not serve in every form (audio joined
     * video, dev.stoker.core.UnservedMedia); an index of rules 1 counted such a record as kept.
     */
    public static final int RECORD_RULES = 2;
    public static final byte[] MAGIC = "STKLEN04".getBytes(StandardCharsets.US_ASCII);
    /** The magic of format 3 (no clips), still read: an index without clips. */
    static final byte[] MAGIC_V3 = "STKLEN03".getBytes(StandardCharsets.US_ASCII);
    /** The magic of format 2 (no videos), still read: an index without videos. */
    static final byte[] MAGIC_V2 = "STKLEN02".getBytes(StandardCharsets.US_ASCII);
    /** The magic of format 1 (lengths only), recognised to be refused with advice. */
    static final byte[] MAGIC_V1 = "STKLEN01".getBytes(StandardCharsets.US_ASCII);
    /** The entry of a record the feed skips as an error. */
    public static final int ERROR = 0;
    /** The entry of a record a limit the user set filters (over --max-seq-len, over --max-images). */
    public static final int FILTERED = -1;

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final int[] NO_IMAGES = new int[0];

    public LengthIndex {
        settings = java.util.Collections.unmodifiableMap(new LinkedHashMap<>(settings));
        if (imageStart.length != lengths.length + 1 || imageStart[0] != 0 || imageStart[lengths.length] != imagePatches.length)
            throw new IllegalArgumentException("length index: " + imageStart.length + " image offsets for " + lengths.length
                    + " records and " + imagePatches.length + " images");
        for (int i = 0; i < lengths.length; i++)
            if (imageStart[i + 1] < imageStart[i]) throw new IllegalArgumentException("length index: record " + i + "'s image offsets descend");
        if (videoStart.length != lengths.length + 1 || videoStart[0] != 0 || videoStart[lengths.length] != videoPatches.length
                || videoGroups.length != videoPatches.length)
            throw new IllegalArgumentException("length index: " + videoStart.length + " video offsets for " + lengths.length
                    + " records, " + videoPatches.length + " video patch counts and " + videoGroups.length + " group counts");
        for (int i = 0; i < lengths.length; i++)
            if (videoStart[i + 1] < videoStart[i]) throw new IllegalArgumentException("length index: record " + i + "'s video offsets descend");
        if (clipStart.length != lengths.length + 1 || clipStart[0] != 0 || clipStart[lengths.length] != clipFrames.length)
            throw new IllegalArgumentException("length index: " + clipStart.length + " clip offsets for " + lengths.length + " records and "
                    + clipFrames.length + " clips");
        for (int i = 0; i < lengths.length; i++)
            if (clipStart[i + 1] < clipStart[i]) throw new IllegalArgumentException("length index: record " + i + "'s clip offsets descend");
    }

    /** An index without clips (as format 3 held). */
    public LengthIndex(String key, String source, String digest, Map<String, Object> settings, int[] lengths, int[] imageStart,
                       int[] imagePatches, int[] videoStart, int[] videoPatches, int[] videoGroups) {
        this(key, source, digest, settings, lengths, imageStart, imagePatches, videoStart, videoPatches, videoGroups,
                new int[lengths.length + 1], NO_IMAGES);
    }

    /** Audio clips of record {@code i} (0 for an error, a filtered record or one without audio). */
    public int clips(int i) { return clipStart[i + 1] - clipStart[i]; }

    /** The frames of record {@code i}'s clips, in placeholder order (a copy). */
    public int[] clipFrames(int i) {
        return clips(i) == 0 ? NO_IMAGES : java.util.Arrays.copyOfRange(clipFrames, clipStart[i], clipStart[i + 1]);
    }

    /** An index without videos (as format 2 held). */
    public LengthIndex(String key, String source, String digest, Map<String, Object> settings, int[] lengths, int[] imageStart,
                       int[] imagePatches) {
        this(key, source, digest, settings, lengths, imageStart, imagePatches, new int[lengths.length + 1], NO_IMAGES, NO_IMAGES);
    }

    /** Images of record {@code i} the feed keeps (0 for an error or a filtered record). */
    public int images(int i) { return imageStart[i + 1] - imageStart[i]; }

    /** The patch counts of record {@code i}'s images, in the sample's order (a copy). */
    public int[] imagePatches(int i) {
        int n = images(i);
        return n == 0 ? NO_IMAGES : java.util.Arrays.copyOfRange(imagePatches, imageStart[i], imageStart[i + 1]);
    }

    /** Videos of record {@code i} the feed keeps (0 for an error or a filtered record). */
    public int videos(int i) { return videoStart[i + 1] - videoStart[i]; }

    /** The patch counts t·h·w of record {@code i}'s videos, in the sample's order (a copy). */
    public int[] videoPatches(int i) {
        return videos(i) == 0 ? NO_IMAGES : java.util.Arrays.copyOfRange(videoPatches, videoStart[i], videoStart[i + 1]);
    }

    /** The temporal groups t of record {@code i}'s videos, in the sample's order (a copy). */
    public int[] videoGroups(int i) {
        return videos(i) == 0 ? NO_IMAGES : java.util.Arrays.copyOfRange(videoGroups, videoStart[i], videoStart[i + 1]);
    }

    /** Σ of record {@code i}'s image patch counts: its pixel_values rows. */
    public long patches(int i) {
        long sum = 0;
        for (int k = imageStart[i]; k < imageStart[i + 1]; k++) sum += imagePatches[k];
        return sum;
    }

    /**
     * What decides a record's length or verdict: the processor, its pixel bounds, the EXIF policy, the source-pixel,
     * sequence and image limits, the truncation policy, the tokenizer ({@code tokenizer}: "bundled" or its file's digest) and,
     * where the model's own renders, the chat template's digest; the version of the rules on what a record may hold
     * ({@link #RECORD_RULES}), so that an index written under older rules is not found rather than read; and, when the
     * options encode video ({@link EncodeOptions#video()}), a {@code video} entry ({@link #videoSettings}). Without
     * video the map is what it was before video, so an index written then is still found.
     */
    public static Map<String, Object> settings(EncodeOptions o, String tokenizer) {
        var m = new LinkedHashMap<String, Object>();
        m.put("record_rules", RECORD_RULES);
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
        if (o.video() != null) m.put("video", videoSettings(o));
        if (o.audio() != null) // an audio family's text, tokens and clips
            m.put("audio", Map.of("family", o.audio().preset().cliName(), "use_audio_in_video", o.audio().useAudioInVideo(),
                    // --audio-pad changes no length but the clips' frames the index keeps (format 4)
                    "pad", o.audio().pad().name().toLowerCase(java.util.Locale.ROOT)));
        return m;
    }

    /**
     * What decides a video's frames, grid and tokens: the sampler, the command-level video options and a model
     * folder's video processor options (key by key, in {@link dev.stoker.video.sample.VideoKey} order), the trainer's
     * contract (text, timestamps, positions) and, when set, the decode memory budget (a video over it is refused before
     * decoding). The default budget, a share of this JVM's heap, is left out: it is no property of the data, and a
     * record it refuses is an error named by that cause. The CPU capability and the decode deadline do not change a
     * shape.
     */
    static Map<String, Object> videoSettings(EncodeOptions o) {
        var v = o.video();
        var m = new LinkedHashMap<String, Object>();
        m.put("sampler", v.sampler().cliName());
        m.put("contract", v.contract().name().toLowerCase(java.util.Locale.ROOT));
        m.put("options", videoOptions(v.options()));
        if (v.processor() != null) m.put("processor", videoOptions(v.processor()));
        if (o.decodeMemoryBytes() > 0) m.put("decode_memory_bytes", o.decodeMemoryBytes());
        return m;
    }

    private static Map<String, Object> videoOptions(dev.stoker.video.sample.VideoOptions options) {
        var m = new LinkedHashMap<String, Object>();
        options.values().forEach((k, value) -> m.put(k.name().toLowerCase(java.util.Locale.ROOT), value)); // an EnumMap: key order
        return m;
    }

    /**
     * How the tokenizer is named in {@link #settings}: "bundled" (null: the bundled Qwen2 tokenizer), or the SHA-256 of
     * its file ({@code sha256:…}), since another tokenizer gives other lengths.
     */
    public static String tokenizerId(Path file) throws IOException {
        if (file == null) return "bundled";
        try (var in = new java.security.DigestInputStream(Files.newInputStream(file), MessageDigest.getInstance("SHA-256"))) {
            in.transferTo(java.io.OutputStream.nullOutputStream());
            return "sha256:" + HexFormat.of().formatHex(in.getMessageDigest().digest());
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
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

    /**
     * An index keyed by {@code digest} and {@code settings} of {@code lengths} and, per record, its kept images' patch
     * counts ({@code imagePatches[i]}; null or empty for a record without images, an error or a filtered one); no videos.
     */
    public static LengthIndex of(String source, String digest, Map<String, Object> settings, int[] lengths, int[][] imagePatches) {
        return of(source, digest, settings, lengths, imagePatches, new int[lengths.length][], new int[lengths.length][]);
    }

    /**
     * The index of what {@code report} found, keyed by its source's digest and {@code settings} ({@link #settings} of the
     * options it was validated with): what {@code stoker validate} writes.
     */
    public static LengthIndex of(Map<String, Object> settings, ValidationReport report) {
        var index = of(report.source(), report.digest(), settings, report.lengths(), report.imagePatches(), report.videoPatches(),
                report.videoGroups());
        return report.clipFrames() == null ? index : index.withClips(report.clipFrames());
    }

    /**
     * This index with per record its clips' frames ({@code clipFrames[i]}; null or empty for a record without audio, an
     * error or a filtered one, whose clips are not kept).
     */
    public LengthIndex withClips(int[][] clipFrames) {
        if (clipFrames.length != lengths.length)
            throw new IllegalArgumentException("length index: " + clipFrames.length + " clip lists for " + lengths.length + " records");
        var kept = new int[lengths.length][];
        for (int i = 0; i < kept.length; i++) kept[i] = lengths[i] > 0 ? clipFrames[i] : null;
        int[] start = new int[lengths.length + 1];
        int[] flat = flatten(kept, start, "clips");
        return new LengthIndex(key, source, digest, settings, lengths, imageStart, imagePatches, videoStart, videoPatches, videoGroups,
                start, flat);
    }

    /**
     * As {@link #of(String, String, Map, int[], int[][])}, with per record its kept videos' patch counts t·h·w
     * ({@code videoPatches[i]}) and temporal groups t ({@code videoGroups[i]}), each null or empty for a record without
     * videos, an error or a filtered one.
     */
    public static LengthIndex of(String source, String digest, Map<String, Object> settings, int[] lengths, int[][] imagePatches,
                                 int[][] videoPatches, int[][] videoGroups) {
        if (imagePatches.length != lengths.length || videoPatches.length != lengths.length || videoGroups.length != lengths.length)
            throw new IllegalArgumentException("length index: " + imagePatches.length + " image lists, " + videoPatches.length + " and "
                    + videoGroups.length + " video lists for " + lengths.length + " records");
        for (int i = 0; i < lengths.length; i++) {
            int p = videoPatches[i] == null ? 0 : videoPatches[i].length, g = videoGroups[i] == null ? 0 : videoGroups[i].length;
            if (p != g) throw new IllegalArgumentException("length index: record " + i + " has " + p + " video patch counts but " + g + " group counts");
        }
        int[] start = new int[lengths.length + 1];
        int[] flat = flatten(imagePatches, start, "images");
        int[] vStart = new int[lengths.length + 1];
        int[] vPatches = flatten(videoPatches, vStart, "videos");
        int[] vGroups = flatten(videoGroups, new int[lengths.length + 1], "videos");
        return new LengthIndex(key(digest, settings), source, digest, settings, lengths, start, flat, vStart, vPatches, vGroups);
    }

    /** The lists end to end, {@code start} filled with each list's offset (records + 1 entries). */
    private static int[] flatten(int[][] lists, int[] start, String what) {
        long total = 0;
        for (int i = 0; i < lists.length; i++) {
            total += lists[i] == null ? 0 : lists[i].length;
            if (total > Integer.MAX_VALUE - 8) throw new IllegalArgumentException("length index: more than " + (Integer.MAX_VALUE - 8) + " " + what);
            start[i + 1] = (int) total;
        }
        int[] flat = new int[(int) total];
        for (int i = 0; i < lists.length; i++)
            if (lists[i] != null) System.arraycopy(lists[i], 0, flat, start[i], lists[i].length);
        return flat;
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
        header.put("images", imagePatches.length);
        header.put("videos", videoPatches.length);
        header.put("clips", clipFrames.length);
        header.put("settings", settings);
        byte[] json = JSON.writeValueAsBytes(header);
        int padded = json.length + (8 - (MAGIC.length + 4 + json.length) % 8) % 8;
        var head = ByteBuffer.allocate(MAGIC.length + 4 + padded).order(ByteOrder.LITTLE_ENDIAN);
        head.put(MAGIC).putInt(padded).put(json);
        while (head.hasRemaining()) head.put((byte) ' ');
        return AtomicFiles.write(file, tmp -> {
            try (var ch = FileChannel.open(tmp, StandardOpenOption.WRITE, StandardOpenOption.TRUNCATE_EXISTING)) {
                writeFully(ch, head.flip());
                var chunk = ByteBuffer.allocate(CHUNK_INTS * 4).order(ByteOrder.LITTLE_ENDIAN);
                for (int i = 0; i < lengths.length; i++) {
                    if (chunk.remaining() < 20) flush(ch, chunk);
                    chunk.putInt(lengths[i]).putInt(images(i)).putInt((int) Math.min(Integer.MAX_VALUE, patches(i))).putInt(videos(i))
                            .putInt(clips(i));
                }
                for (int p : imagePatches) {
                    if (chunk.remaining() < 4) flush(ch, chunk);
                    chunk.putInt(p);
                }
                for (int k = 0; k < videoPatches.length; k++) {
                    if (chunk.remaining() < 8) flush(ch, chunk);
                    chunk.putInt(videoGroups[k]).putInt(videoPatches[k]);
                }
                for (int f : clipFrames) {
                    if (chunk.remaining() < 4) flush(ch, chunk);
                    chunk.putInt(f);
                }
                flush(ch, chunk);
            }
        });
    }

    /** Ints per read or write of the tables: the file is streamed, never held whole as bytes. */
    private static final int CHUNK_INTS = 1 << 16;

    /**
     * Reads an index written by {@link #write} (format 4), by the writer before audio packs (format 3, read as an index
     * without clips) or by the writer before video (format 2, read as an index without videos or clips); a file that is not one, is cut short or whose tables disagree is refused, and a format 1 file
     * ({@code STKLEN01}, lengths only) with a request to re-run {@code stoker validate}.
     */
    public static LengthIndex read(Path file) throws IOException {
        try (var ch = FileChannel.open(file, StandardOpenOption.READ)) {
            long size = ch.size();
            if (size < MAGIC.length + 4) throw new IOException(file + ": not a length index (" + size + " bytes)");
            var head = ByteBuffer.allocate(MAGIC.length + 4).order(ByteOrder.LITTLE_ENDIAN);
            readFully(ch, head, 0);
            byte[] magic = new byte[MAGIC.length];
            head.flip().get(magic);
            if (java.util.Arrays.equals(magic, MAGIC_V1))
                throw new IOException(file + ": a length index of format 1 (STKLEN01, token lengths only); packing needs each image's "
                        + "patches too (format 3): re-run stoker validate");
            boolean v2 = java.util.Arrays.equals(magic, MAGIC_V2), v3 = java.util.Arrays.equals(magic, MAGIC_V3);
            if (!v2 && !v3 && !java.util.Arrays.equals(magic, MAGIC)) throw new IOException(file + ": not a length index (bad magic)");
            boolean v4 = !v2 && !v3;
            int columns = v2 ? 3 : v3 ? 4 : 5;
            int h = head.getInt();
            if (h < 2 || MAGIC.length + 4L + h > size || h > 1 << 20) throw new IOException(file + ": length index header of " + h + " bytes is corrupt");
            var json = ByteBuffer.allocate(h);
            readFully(ch, json, MAGIC.length + 4);
            JsonNode header = JSON.readTree(new String(json.array(), StandardCharsets.UTF_8));
            long records = header.path("records").asLong(-1);
            long images = header.path("images").asLong(-1);
            long videos = v2 ? 0 : header.path("videos").asLong(-1);
            long clips = v4 ? header.path("clips").asLong(-1) : 0;
            long start = MAGIC.length + 4L + h;
            if (records < 0 || images < 0 || videos < 0 || clips < 0 || records > Integer.MAX_VALUE - 8 || images > Integer.MAX_VALUE - 8
                    || videos > Integer.MAX_VALUE - 8 || clips > Integer.MAX_VALUE - 8
                    || start + 4L * columns * records + 4 * images + 8 * videos + 4 * clips != size)
                throw new IOException(file + ": length index says " + records + " records, " + images + " images, " + videos
                        + " videos and " + clips + " clips but holds " + (size - start) + " bytes of tables");
            int n = (int) records;
            int[] lengths = new int[n];
            int[] imageStart = new int[n + 1];
            int[] videoStart = new int[n + 1];
            int[] clipStart = new int[n + 1];
            long[] patchSums = new long[n];
            int[] table = new int[5 * CHUNK_INTS];
            long at = start;
            for (int i = 0; i < n; ) {
                int rows = Math.min(CHUNK_INTS, n - i);
                readInts(ch, at, table, columns * rows);
                at += 4L * columns * rows;
                for (int r = 0; r < rows; r++, i++) {
                    int count = table[columns * r + 1];
                    if (count < 0 || imageStart[i] + (long) count > images)
                        throw new IOException(file + ": record " + i + " claims " + count + " images, past the " + images + " the index holds");
                    int vc = v2 ? 0 : table[columns * r + 3];
                    if (vc < 0 || videoStart[i] + (long) vc > videos)
                        throw new IOException(file + ": record " + i + " claims " + vc + " videos, past the " + videos + " the index holds");
                    int cc = v4 ? table[columns * r + 4] : 0;
                    if (cc < 0 || clipStart[i] + (long) cc > clips)
                        throw new IOException(file + ": record " + i + " claims " + cc + " clips, past the " + clips + " the index holds");
                    lengths[i] = table[columns * r];
                    imageStart[i + 1] = imageStart[i] + count;
                    videoStart[i + 1] = videoStart[i] + vc;
                    clipStart[i + 1] = clipStart[i] + cc;
                    patchSums[i] = table[columns * r + 2];
                }
            }
            if (imageStart[n] != images)
                throw new IOException(file + ": the records claim " + imageStart[n] + " images but the index holds " + images);
            if (videoStart[n] != videos)
                throw new IOException(file + ": the records claim " + videoStart[n] + " videos but the index holds " + videos);
            if (clipStart[n] != clips)
                throw new IOException(file + ": the records claim " + clipStart[n] + " clips but the index holds " + clips);
            int[] patches = new int[(int) images];
            for (int k = 0; k < patches.length; ) {
                int m = Math.min(table.length, patches.length - k);
                readInts(ch, at, table, m);
                at += 4L * m;
                System.arraycopy(table, 0, patches, k, m);
                k += m;
            }
            int[] videoPatches = new int[(int) videos], videoGroups = new int[(int) videos];
            for (int k = 0; k < videoPatches.length; ) {
                int m = Math.min(table.length / 2, videoPatches.length - k);
                readInts(ch, at, table, 2 * m);
                at += 8L * m;
                for (int j = 0; j < m; j++, k++) {
                    videoGroups[k] = table[2 * j];
                    videoPatches[k] = table[2 * j + 1];
                }
            }
            int[] clipFrames = new int[(int) clips];
            for (int k = 0; k < clipFrames.length; ) {
                int m = Math.min(table.length, clipFrames.length - k);
                readInts(ch, at, table, m);
                at += 4L * m;
                System.arraycopy(table, 0, clipFrames, k, m);
                k += m;
            }
            @SuppressWarnings("unchecked")
            Map<String, Object> settings = JSON.convertValue(header.path("settings"), LinkedHashMap.class);
            var index = new LengthIndex(header.path("key").asText(), header.path("source").asText(), header.path("digest").asText(),
                    settings, lengths, imageStart, patches, videoStart, videoPatches, videoGroups, clipStart, clipFrames);
            for (int i = 0; i < n; i++) {
                if (lengths[i] < FILTERED) throw new IOException(file + ": record " + i + " has length " + lengths[i]);
                if (index.patches(i) != patchSums[i] && patchSums[i] != Integer.MAX_VALUE)
                    throw new IOException(file + ": record " + i + "'s patches " + patchSums[i] + " are not the sum of its images' " + index.patches(i));
                for (int k = imageStart[i]; k < imageStart[i + 1]; k++)
                    if (patches[k] <= 0) throw new IOException(file + ": record " + i + " has an image of " + patches[k] + " patches");
                for (int k = videoStart[i]; k < videoStart[i + 1]; k++)
                    if (videoGroups[k] < 1 || videoPatches[k] < videoGroups[k] || videoPatches[k] % videoGroups[k] != 0)
                        throw new IOException(file + ": record " + i + " has a video of " + videoPatches[k] + " patches in " + videoGroups[k]
                                + " temporal groups");
                for (int k = clipStart[i]; k < clipStart[i + 1]; k++)
                    if (clipFrames[k] <= 0) throw new IOException(file + ": record " + i + " has a clip of " + clipFrames[k] + " frames");
                if (lengths[i] <= 0 && (imageStart[i + 1] > imageStart[i] || videoStart[i + 1] > videoStart[i] || clipStart[i + 1] > clipStart[i]))
                    throw new IOException(file + ": record " + i + " is not fed (length " + lengths[i] + ") but has images, videos or clips");
            }
            return index;
        }
    }

    private static void readInts(FileChannel ch, long at, int[] into, int count) throws IOException {
        var buf = ByteBuffer.allocate(4 * count).order(ByteOrder.LITTLE_ENDIAN);
        readFully(ch, buf, at);
        buf.flip().asIntBuffer().get(into, 0, count);
    }

    private static void writeFully(FileChannel ch, ByteBuffer buf) throws IOException {
        while (buf.hasRemaining()) ch.write(buf);
    }

    /** Writes what {@code buf} holds and empties it. */
    private static void flush(FileChannel ch, ByteBuffer buf) throws IOException {
        writeFully(ch, buf.flip());
        buf.clear();
    }

    private static void readFully(FileChannel ch, ByteBuffer buf, long at) throws IOException {
        while (buf.hasRemaining()) {
            int n = ch.read(buf, at + buf.position());
            if (n < 0) throw new IOException("length index cut short");
        }
    }
}
