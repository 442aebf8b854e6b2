package dev.stoker.encode.cache;

import dev.stoker.cache.CacheKey;
import dev.stoker.cache.SampleCache;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.image.decode.ImageDecoders;
import dev.stoker.image.decode.ImageFormat;

/**
 * The cache of preprocessed samples as an encoder uses it: a {@link SampleCache} and the keys of what an encoding
 * stores there. An image's entry is its resized u8 RGB pixels (HWC, the smart_resize target, never float32: an eighth
 * of its {@code pixel_values}), keyed by the SHA-256 of the image's bytes and every setting that decides those pixels:
 * the source and target size, the resize backend, the EXIF policy, the DCT scale and the decoder (libjpeg-turbo or
 * libwebp where they load, else ImageIO) of its format, and {@link #PIXEL_RULES}. Normalization and patchification
 * are not in the entry (they run on read, into the batch), so the mean, std, patch layout and wire format are not in
 * the key; neither is the path.
 */
public final class PreprocessedCache {
    /** Raised when the decoding or resizing code changes what pixels it produces: old entries then no longer match. */
    public static final int PIXEL_RULES = 1;
    /** Raised when the chat rendering, tokenization, labels or M-RoPE positions change: old token entries no longer match. */
    public static final int TEXT_RULES = 1;
    /** The longest token entry read back: 6 int64 per token (ids, labels, mask, 3 position rows) of 1M tokens. */
    public static final int MAX_TEXT_ENTRY_BYTES = 12 + 48 * (1 << 20);

    private final SampleCache store;
    /** Where images' and videos' entries are read and written: {@link #store} unless routed (a cluster's affinity). */
    private volatile dev.stoker.cache.CacheEntries media;

    public PreprocessedCache(SampleCache store) {
        this.store = java.util.Objects.requireNonNull(store, "store");
        this.media = store;
    }

    /** This node's cache: token entries, and media entries unless {@link #routeMedia routed}. */
    public SampleCache store() { return store; }

    /** Where image and video entries go: this node's cache, or a cluster job's {@link dev.stoker.cache.AffineCache}. */
    public dev.stoker.cache.CacheEntries media() { return media; }

    /**
     * Reads and writes image and video entries through {@code entries} from now on (null: this node's cache again). Token
     * entries stay local: they are small and cheap to build again, so asking another node for them would cost more than
     * it saves.
     */
    public void routeMedia(dev.stoker.cache.CacheEntries entries) { media = entries == null ? store : entries; }

    /**
     * The key of an image's resized pixels.
     *
     * @param contentSha256 the SHA-256 of the image's bytes
     * @param format        its format (which decoder reads it)
     * @param scale         the DCT scale it is decoded at (1: none)
     */
    /**
     * The key of a sample's token-side inputs (ids, labels, attention mask, positions): its messages (roles, texts,
     * image references in order) and the grids of its images, under the settings that decide them — the family, the
     * tokenizer's identity (the SHA-256 of its tokenizer.json), the chat template (the built-in one of the family or the
     * model's, by its SHA-256), the sequence limit and truncation, the input contract, the model folder. The sample's id
     * is not in it (it changes no token).
     */
    public static CacheKey textKey(EncodeOptions options, String tokenizerIdentity, dev.stoker.text.ChatSample sample, java.util.List<long[]> grids) {
        String settings = "rules=" + TEXT_RULES + " preset=" + options.preset() + " tokenizer=" + tokenizerIdentity + " template="
                + (options.chatTemplate() == null ? "builtin" : options.chatTemplateSha256()) + " maxLength=" + options.maxSequenceLength()
                + " truncation=" + options.truncation() + " contract=" + options.inputContract() + " model=" + options.model()
                + " video=" + (options.video() == null ? "none" : options.video().contract());
        var content = new StringBuilder(sample.messages().toString());
        for (long[] g : grids) content.append('|').append(java.util.Arrays.toString(g));
        return CacheKey.of("text", settings, CacheKey.sha256(content.toString().getBytes(java.nio.charset.StandardCharsets.UTF_8)));
    }

    /** A sample's token-side inputs as an entry holds them: kept images and videos, length, then the four arrays, little-endian. */
    public static byte[] textBytes(dev.stoker.text.TextFeatures t) {
        int n = t.length();
        var b = java.nio.ByteBuffer.allocate(12 + 48 * n).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        b.putInt(t.imagesKept()).putInt(t.videosKept()).putInt(n);
        for (long[] a : new long[][] {t.inputIds(), t.labels(), t.attentionMask(), t.positionIds()}) for (long v : a) b.putLong(v);
        return b.array();
    }

    /** {@link #textBytes}' inverse; null when {@code bytes} is not such an entry (the caller then builds the tokens again). */
    public static dev.stoker.text.TextFeatures text(byte[] bytes) {
        if (bytes.length < 12) return null;
        var b = java.nio.ByteBuffer.wrap(bytes).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        int images = b.getInt(), videos = b.getInt(), n = b.getInt();
        if (images < 0 || videos < 0 || n < 0 || bytes.length != 12 + 48L * n) return null;
        long[] ids = new long[n], labels = new long[n], mask = new long[n], pos = new long[3 * n];
        for (long[] a : new long[][] {ids, labels, mask, pos}) for (int i = 0; i < a.length; i++) a[i] = b.getLong();
        return new dev.stoker.text.TextFeatures(ids, labels, mask, pos, images, videos);
    }

    public static CacheKey imageKey(EncodeOptions options, byte[] contentSha256, ImageFormat format, int srcHeight, int srcWidth,
                                    int resizedHeight, int resizedWidth, int scale) {
        String decoder = switch (format) {
            case JPEG -> ImageDecoders.turboJpegAvailable() ? "libjpeg-turbo" : "imageio";
            case WEBP -> ImageDecoders.libWebpAvailable() ? "libwebp" : "imageio";
            default -> "imageio";
        };
        String settings = "rules=" + PIXEL_RULES + " backend=" + options.imageBackend() + " exif=" + options.exif() + " format=" + format
                + " decoder=" + decoder + " scale=" + scale + " src=" + srcHeight + "x" + srcWidth + " target=" + resizedHeight + "x"
                + resizedWidth;
        return CacheKey.of("image-resized-u8", settings, contentSha256);
    }
}
