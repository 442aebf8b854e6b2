package dev.stoker.cache;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;
import java.util.HexFormat;

/**
 * The name of one cache entry: SHA-256 over what determines its bytes — the content's digest (never its path) and every
 * setting that changes the result (processor geometry, resize backend, EXIF policy, decoder and its version, the entry
 * format). Two services that would compute the same bytes compute the same key, so a second service over the same
 * data and settings finds the first one's entries; any change of setting or content gives another key.
 */
public final class CacheKey {
    private final byte[] digest;

    private CacheKey(byte[] digest) {
        this.digest = digest;
    }

    /** The SHA-256 of {@code bytes} (the content digest an entry's key starts from). */
    public static byte[] sha256(byte[] bytes) {
        var md = sha256();
        md.update(bytes);
        return md.digest();
    }

    /** A key over {@code kind} (what the entry holds), the {@code settings} text and the content digests, in order. */
    public static CacheKey of(String kind, String settings, byte[]... contentDigests) {
        var md = sha256();
        md.update(("stoker-cache/1\n" + kind + "\n" + settings + "\n").getBytes(StandardCharsets.UTF_8));
        for (byte[] d : contentDigests) {
            md.update((byte) d.length);
            md.update(d);
        }
        return new CacheKey(md.digest());
    }

    /** The key whose 32 bytes are {@code digest} (read back from an entry's header). */
    static CacheKey ofDigest(byte[] digest) {
        if (digest.length != 32) throw new IllegalArgumentException("a key has 32 bytes, got " + digest.length);
        return new CacheKey(digest.clone());
    }

    byte[] bytes() { return digest.clone(); }

    /** The key's first 8 bytes as a long (big-endian): uniform, since the key is a SHA-256. */
    long prefix64() {
        long v = 0;
        for (int i = 0; i < 8; i++) v = v << 8 | (digest[i] & 0xff);
        return v;
    }

    /** The key whose 64 hex digits are {@code hex} (a peer's request names an entry so); IllegalArgumentException otherwise. */
    public static CacheKey ofHex(String hex) {
        if (hex == null || hex.length() != 64) throw new IllegalArgumentException("a key has 64 hex digits");
        return ofDigest(HexFormat.of().parseHex(hex));
    }

    /** The 64 hex digits, the entry's file name. */
    public String hex() { return HexFormat.of().formatHex(digest); }

    private static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    @Override public boolean equals(Object o) { return o instanceof CacheKey k && Arrays.equals(digest, k.digest); }

    @Override public int hashCode() { return Arrays.hashCode(digest); }

    @Override public String toString() { return hex(); }
}
