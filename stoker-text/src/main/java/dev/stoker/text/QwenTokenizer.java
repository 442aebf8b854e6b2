package dev.stoker.text;

import ai.djl.huggingface.tokenizers.HuggingFaceTokenizer;
import ai.djl.huggingface.tokenizers.jni.TokenizersLibrary;
import java.io.BufferedInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.zip.GZIPInputStream;

/**
 * The Qwen2 byte-level BPE tokenizer (shared by Qwen2-VL, Qwen2.5-VL and Qwen3-VL, spec §9), backed by
 * the Hugging Face {@code tokenizers} Rust library through DJL.
 *
 * <p>Configured for SFT: no special tokens added (no BOS/EOS), truncation and padding off. DJL would
 * otherwise truncate every encoding to 512 tokens without telling; length limits are applied
 * by {@link TokenSequenceBuilder}, which knows where images start and end.
 *
 * <p>{@link #encode} calls DJL's JNI layer directly and fetches only the ids: DJL's
 * {@code HuggingFaceTokenizer.encode} also copies tokens, word ids, masks and per-token character spans
 * across JNI, a fifth to a quarter of the time of a 400-word sample. The Java-side text preparation that
 * this skips (lower-casing, accent stripping, prefix space) is off for this tokenizer; the tests
 * compare the ids with both DJL's {@code encode} and the Python reference.
 *
 * <p>Threading: {@link #encode} may be called from any number of threads at once. DJL's JNI
 * {@code encode} turns the handle into a {@code &mut Tokenizer} but only calls
 * {@code Tokenizer::encode_char_offsets(&self)}, whose BPE cache sits behind a lock; the only mutating
 * calls (truncation and padding setters) run once, in the constructor. A 16-thread stress test found
 * no divergence. A read-write lock keeps {@link #close} from freeing the native object under a
 * running encode, which would crash the JVM.
 */
public final class QwenTokenizer implements AutoCloseable {
    /** Classpath location of the vendored tokenizer.json (see SOURCE.md beside it). */
    public static final String BUNDLED_RESOURCE = "/dev/stoker/text/qwen2/tokenizer.json.gz";

    static final Map<String, String> OPTIONS = Map.of(
            "addSpecialTokens", "false",
            "truncation", "false",
            "padding", "false",
            "withOverflowingTokens", "false");

    private final HuggingFaceTokenizer tokenizer;
    private final String identity;
    private final ReentrantReadWriteLock lifecycle = new ReentrantReadWriteLock();
    private boolean closed;

    private QwenTokenizer(HuggingFaceTokenizer tokenizer, String identity) {
        this.tokenizer = tokenizer;
        this.identity = identity;
    }

    /**
     * What this tokenizer is: {@code sha256:} and the SHA-256 of its {@code tokenizer.json} (decompressed), so that two
     * instances loaded from the same file (or both bundled) have the same identity and any other file another one; what
     * the cache of preprocessed samples keys token ids by.
     */
    public String identity() { return identity; }

    /** Loads the tokenizer bundled in this jar; each call returns a new instance the caller closes. */
    public static QwenTokenizer bundled() {
        var in = QwenTokenizer.class.getResourceAsStream(BUNDLED_RESOURCE);
        if (in == null) throw new IllegalStateException("classpath resource " + BUNDLED_RESOURCE + " is missing");
        try (var gz = new GZIPInputStream(new BufferedInputStream(in, 1 << 16), 1 << 16)) {
            return fromStream(gz);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read " + BUNDLED_RESOURCE, e);
        }
    }

    /** Loads a {@code tokenizer.json} or gzip-compressed {@code tokenizer.json.gz} (detected by its magic bytes). */
    public static QwenTokenizer load(Path file) throws IOException {
        if (Files.isDirectory(file)) file = file.resolve("tokenizer.json");
        try (var raw = new BufferedInputStream(Files.newInputStream(file), 1 << 16)) {
            raw.mark(2);
            boolean gzip = raw.read() == 0x1f && raw.read() == 0x8b;
            raw.reset();
            try (InputStream in = gzip ? new GZIPInputStream(raw, 1 << 16) : raw) {
                return fromStream(in);
            }
        } catch (RuntimeException e) {
            throw new IOException("cannot load tokenizer from " + file + ": " + e.getMessage(), e);
        }
    }

    private static QwenTokenizer fromStream(InputStream raw) throws IOException {
        java.security.MessageDigest sha;
        try {
            sha = java.security.MessageDigest.getInstance("SHA-256");
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
        var in = new java.security.DigestInputStream(raw, sha);
        var tok = HuggingFaceTokenizer.newInstance(in, OPTIONS);
        in.transferTo(java.io.OutputStream.nullOutputStream()); // whatever the parser left unread, so the digest covers the file
        if (!"DO_NOT_TRUNCATE".equals(tok.getTruncation()) || !"DO_NOT_PAD".equals(tok.getPadding())) {
            var state = tok.getTruncation() + "/" + tok.getPadding();
            tok.close();
            throw new IllegalStateException("DJL did not disable truncation/padding: " + state);
        }
        return new QwenTokenizer(tok, "sha256:" + java.util.HexFormat.of().formatHex(sha.digest()));
    }

    /** Token ids of {@code text}: added tokens split first, NFC, split regex, byte-level BPE (spec §9). */
    public long[] encode(String text) {
        var lock = lifecycle.readLock();
        lock.lock();
        try {
            if (closed) throw new IllegalStateException("tokenizer is closed");
            long encoding = TokenizersLibrary.LIB.encode(tokenizer.getHandle(), text, false);
            try {
                return TokenizersLibrary.LIB.getTokenIds(encoding);
            } finally {
                TokenizersLibrary.LIB.deleteEncoding(encoding);
            }
        } finally {
            lock.unlock();
        }
    }

    /** Text of {@code ids}, special tokens included (for diagnostics and tests). */
    public String decode(long[] ids) {
        var lock = lifecycle.readLock();
        lock.lock();
        try {
            if (closed) throw new IllegalStateException("tokenizer is closed");
            return tokenizer.decode(ids, false);
        } finally {
            lock.unlock();
        }
    }

    /** Frees the native tokenizer after running encodes finish; later calls fail. Idempotent. */
    @Override
    public void close() {
        var lock = lifecycle.writeLock();
        lock.lock();
        try {
            if (!closed) {
                closed = true;
                tokenizer.close();
            }
        } finally {
            lock.unlock();
        }
    }
}
