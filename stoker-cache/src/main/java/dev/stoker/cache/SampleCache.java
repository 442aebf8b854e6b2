package dev.stoker.cache;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.FileTime;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.LongSupplier;
import java.util.zip.CRC32C;

/**
 * The cache of preprocessed samples on the node's disk: one file per entry, named by its {@link CacheKey}, holding
 * bytes a sample's preprocessing produced (resized u8 pixels, …), stored raw or zstd-compressed ({@link Zstd}; raw where
 * libzstd does not load), within a byte budget.
 *
 * <p><b>Why files</b> (not an embedded store such as LMDB): an entry is about a megabyte (a resized image) up to
 * hundreds (a video's frames); per-file costs (open, read, close: tens of microseconds) are negligible beside its
 * decompression (milliseconds), a file needs no single writer or lock, a rename makes a write atomic for every reader
 * on the host, and a torn entry damages one file, never an index. LMDB's strength, many small values under one
 * transaction, is not this workload.
 *
 * <p><b>Entry format</b> (little-endian): magic {@code STKC}, format version (u16), codec (u8: 0 raw, 1 zstd), a zero
 * byte, the key (32 bytes), the raw and the stored length (u64 each), a CRC-32C over those 56 header bytes and the
 * stored payload (u32), four zero bytes, then the payload at byte 64. A read checks the magic, version, key, lengths
 * against the file's size and the expected raw size, and the CRC before decompressing; a file that fails any check is
 * {@link CacheStats#corrupt() corrupt}: counted, removed, reported as a miss, never served.
 *
 * <p><b>Writes</b> go to a temporary file in the entry's folder, then are renamed over the entry: a reader sees the
 * whole old entry, the whole new one or none, also across processes. Without fsync a crash may leave a renamed file
 * whose bytes never reached the disk; the CRC finds it.
 *
 * <p><b>Budget and eviction, epoch-aware</b>: the stored bytes (payload and header) stay within {@code budgetBytes}. An
 * entry's file time is its last use (set when written, and on the first hit of each run). When a write would exceed
 * the budget, entries this run has not used are removed, least recently used first; entries this run used are never
 * removed for new ones, and if not enough can be removed the new entry is not admitted ({@link CacheStats#rejected()}).
 * So a job whose data does not fit keeps a stable part of it cached from epoch to epoch instead of evicting each entry
 * just before its next use (plain LRU's zero hit rate on a cyclic scan), and entries of earlier jobs make room first.
 *
 * <p><b>Sharing</b>: services on one host may open the same folder; each learns the stored bytes by listing the
 * folder when it opens and then counts its own writes and removals, so their budgets are approximate by what the
 * others wrote since (a later open counts everything).
 *
 * <p>Thread-safe.
 */
public final class SampleCache implements CacheEntries, AutoCloseable {
    static final int HEADER = 64;
    private static final int MAGIC = 0x434B5453; // "STKC" little-endian
    private static final short VERSION = 1;
    private static final byte RAW = 0, ZSTD = 1;
    /** zstd level 1: on resized photos about the ratio of level 3, at twice its speed (docs/cache.md). */
    public static final int LEVEL_DEFAULT = 1;
    private static final String SUFFIX = ".stc";

    private final Path root;
    private final long budget;
    private final int level;
    private final boolean compress;
    private final LongSupplier clock;
    private final long runStart;
    private final ConcurrentHashMap<CacheKey, Entry> entries = new ConcurrentHashMap<>();
    private final AtomicLong stored = new AtomicLong();
    private final LongAdder hits = new LongAdder(), misses = new LongAdder(), corrupt = new LongAdder(), written = new LongAdder(),
            writeFailures = new LongAdder(), rawRead = new LongAdder(), storedRead = new LongAdder(), rawWritten = new LongAdder(),
            storedWritten = new LongAdder(), evicted = new LongAdder(), rejected = new LongAdder();
    private final ThreadLocal<Scratch> scratch = ThreadLocal.withInitial(Scratch::new);
    /** The two-hex-digit folders known to exist (made once, not asked for at each write). */
    private final java.util.Set<Path> shards = ConcurrentHashMap.newKeySet();

    /** One entry as this process knows it: its stored size and last use (epoch millis). */
    private static final class Entry {
        final long size;
        volatile long lastUsed;

        Entry(long size, long lastUsed) {
            this.size = size;
            this.lastUsed = lastUsed;
        }
    }

    /** Per-thread native buffers (a file's bytes; a payload to compress or decompress), grown as needed. */
    private static final class Scratch {
        final Arena arena = Arena.ofAuto();
        MemorySegment file = MemorySegment.NULL, raw = MemorySegment.NULL;

        MemorySegment file(long n) {
            if (file.byteSize() < n) file = arena.allocate(Math.max(n, file.byteSize() * 3 / 2), 64);
            return file.asSlice(0, n);
        }

        MemorySegment raw(long n) {
            if (raw.byteSize() < n) raw = arena.allocate(Math.max(n, raw.byteSize() * 3 / 2), 64);
            return raw.asSlice(0, n);
        }
    }

    private SampleCache(Path root, long budget, int level, boolean compress, LongSupplier clock) {
        this.root = root;
        this.budget = budget;
        this.level = level;
        this.compress = compress;
        this.clock = clock;
        this.runStart = clock.getAsLong();
    }

    /**
     * Opens (creating) the cache in {@code dir}: lists the entries there (their sizes count against {@code budgetBytes}),
     * removes temporary files a crashed writer left more than an hour ago; new entries are stored raw (the default of
     * {@code --cache-compress}: docs/cache.md says why), entries of either codec are read.
     */
    public static SampleCache open(Path dir, long budgetBytes) throws IOException {
        return open(dir, budgetBytes, LEVEL_DEFAULT, false, System::currentTimeMillis);
    }

    /** {@link #open(Path, long)} with the zstd level, whether to compress, and the clock of last uses (tests). */
    public static SampleCache open(Path dir, long budgetBytes, int level, boolean compress, LongSupplier clock) throws IOException {
        if (budgetBytes <= 0) throw new IllegalArgumentException("cache budget must be positive, got " + budgetBytes);
        if (compress && !Zstd.available()) throw new IllegalStateException(Zstd.unavailableReason());
        Path root = dir.resolve("v1");
        Files.createDirectories(root);
        var cache = new SampleCache(root, budgetBytes, level, compress, clock);
        cache.scan();
        return cache;
    }

    /** The folder entries live in. */
    public Path root() { return root; }

    public long budgetBytes() { return budget; }

    /** Whether entries are zstd-compressed. */
    public boolean compressed() { return compress; }

    private void scan() throws IOException {
        long staleTmp = clock.getAsLong() - 3_600_000L;
        try (DirectoryStream<Path> shards = Files.newDirectoryStream(root)) {
            for (Path shard : shards) {
                if (!Files.isDirectory(shard)) continue;
                try (DirectoryStream<Path> files = Files.newDirectoryStream(shard)) {
                    for (Path f : files) {
                        String name = f.getFileName().toString();
                        try {
                            long modified = Files.getLastModifiedTime(f).toMillis();
                            if (name.endsWith(SUFFIX) && name.length() == 64 + SUFFIX.length()) {
                                var key = CacheKey.ofDigest(java.util.HexFormat.of().parseHex(name, 0, 64));
                                long size = Files.size(f);
                                if (entries.putIfAbsent(key, new Entry(size, modified)) == null) stored.addAndGet(size);
                            } else if (name.endsWith(".tmp") && modified < staleTmp) {
                                Files.deleteIfExists(f);
                            }
                        } catch (NoSuchFileException gone) {
                            // another service removed it meanwhile
                        } catch (IllegalArgumentException notHex) {
                            // not an entry of ours: left alone
                        }
                    }
                }
            }
        }
    }

    private Path path(CacheKey key) {
        String hex = key.hex();
        return root.resolve(hex.substring(0, 2)).resolve(hex + SUFFIX);
    }

    /**
     * Reads entry {@code key} into {@code dst}, which is exactly as long as the entry's raw bytes must be: true on a hit;
     * false on a miss, and on an entry that is torn, damaged, of another format or another length (counted as corrupt
     * and removed). Never throws for a bad entry; an I/O error reading one is a miss too.
     */
    @Override
    public boolean read(CacheKey key, MemorySegment dst) {
        return readEntry(key, dst, dst.byteSize()) != null;
    }

    /**
     * {@inheritDoc}
     *
     * <p>Here an uncompressed entry is mapped read-only and checked (its checksum over the mapped bytes) before
     * {@code view} reads its payload in place: no copy into the process, no buffer of the entry's size. Safe against this
     * cache's own writers and evictions, which replace and remove files (an entry's file is never truncated in place: a
     * file truncated under a mapping by someone else would fault the read). A compressed entry, or one whose file is
     * not an uncompressed entry of that length, is read as {@link #read(CacheKey, MemorySegment)} reads it, into
     * {@code fallback}'s segment; a bad one is counted and removed as there.
     */
    @Override
    public boolean readView(CacheKey key, long rawLength, java.util.function.Supplier<MemorySegment> fallback,
                            java.util.function.Consumer<MemorySegment> view) {
        Path p = path(key);
        try (var arena = Arena.ofConfined()) {
            MemorySegment file;
            try (var ch = FileChannel.open(p, StandardOpenOption.READ)) {
                long size = ch.size();
                if (size != HEADER + rawLength) return CacheEntries.super.readView(key, rawLength, fallback, view);
                file = ch.map(FileChannel.MapMode.READ_ONLY, 0, size, arena);
            } catch (NoSuchFileException e) {
                misses.increment();
                forget(key);
                return false;
            } catch (IOException e) {
                misses.increment();
                return false;
            }
            if (file.get(ValueLayout.JAVA_BYTE, 6) != RAW) return CacheEntries.super.readView(key, rawLength, fallback, view);
            String bad = check(file, key, rawLength);
            if (bad != null) return corrupt(key, p, bad) != null;
            hits.increment();
            rawRead.add(rawLength);
            storedRead.add(file.byteSize());
            touch(key, p);
            view.accept(file.asSlice(HEADER, rawLength));
            return true;
        }
    }

    /**
     * Entry {@code key}'s raw bytes, whatever their length up to {@code maxRawBytes} (an entry whose length the reader
     * cannot know beforehand, e.g. a sample's token ids); null on a miss, and on an entry that is damaged, of another
     * format or longer than that (counted as corrupt and removed).
     */
    public byte[] read(CacheKey key, int maxRawBytes) {
        MemorySegment got = readEntry(key, null, maxRawBytes);
        return got == null ? null : got.toArray(ValueLayout.JAVA_BYTE);
    }

    /**
     * Reads entry {@code key} into {@code dst} (exactly {@code rawLength} bytes), or with {@code dst} null into this
     * thread's scratch (at most {@code rawLength} bytes); returns the bytes read, or null on a miss or a bad entry.
     */
    private MemorySegment readEntry(CacheKey key, MemorySegment dst, long rawLength) {
        Path p = path(key);
        Scratch s = scratch.get();
        MemorySegment file;
        try (var ch = FileChannel.open(p, StandardOpenOption.READ)) {
            long size = ch.size();
            if (size < HEADER || size > HEADER + Math.max(Zstd.available() ? Zstd.compressBound(rawLength) : 0, rawLength)) {
                return corrupt(key, p, "size " + size);
            }
            file = s.file(size);
            ByteBuffer bb = file.asByteBuffer();
            while (bb.hasRemaining()) if (ch.read(bb) < 0) return corrupt(key, p, "shorter than its size");
        } catch (NoSuchFileException e) {
            misses.increment();
            forget(key);
            return null;
        } catch (IOException e) {
            misses.increment();
            return null;
        }
        long raw = file.get(ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN), 40);
        if (dst == null && (raw < 0 || raw > rawLength)) return corrupt(key, p, "raw length " + raw + ", at most " + rawLength + " expected");
        String bad = check(file, key, dst == null ? raw : rawLength);
        if (bad != null) return corrupt(key, p, bad);
        if (dst == null) dst = s.raw(raw);
        byte codec = file.get(ValueLayout.JAVA_BYTE, 6);
        long storedLength = file.byteSize() - HEADER;
        MemorySegment payload = file.asSlice(HEADER, storedLength);
        try {
            if (codec == RAW) MemorySegment.copy(payload, 0, dst, 0, storedLength);
            else if (dst.isNative()) Zstd.decompressExact(dst, payload);
            else {
                MemorySegment tmp = s.raw(dst.byteSize());
                Zstd.decompressExact(tmp, payload);
                MemorySegment.copy(tmp, 0, dst, 0, tmp.byteSize());
            }
        } catch (IllegalStateException e) {
            return corrupt(key, p, e.getMessage());
        }
        hits.increment();
        rawRead.add(dst.byteSize());
        storedRead.add(file.byteSize());
        touch(key, p);
        return dst;
    }

    /**
     * Whether this process knows entry {@code key} to be here (listed at open, written or read since): no file is opened
     * and nothing is counted. Another service's entry written since the open is not known; a listed entry may have been
     * removed since by another service (its read is then a miss).
     */
    public boolean holds(CacheKey key) { return entries.containsKey(key); }

    /** {@link #read(CacheKey, MemorySegment)} into {@code dst[offset, offset + length)}. */
    @Override
    public boolean read(CacheKey key, byte[] dst, int offset, int length) {
        return read(key, MemorySegment.ofArray(dst).asSlice(offset, length));
    }

    /** Why the entry in {@code file} is not one to serve as {@code key}'s {@code rawLength} bytes; null when it is. */
    private static String check(MemorySegment file, CacheKey key, long rawLength) {
        var le = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
        var le64 = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
        if (file.get(le, 0) != MAGIC) return "not a cache entry (magic)";
        short version = file.get(ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN), 4);
        if (version != VERSION) return "entry format " + version;
        byte codec = file.get(ValueLayout.JAVA_BYTE, 6);
        if (codec != RAW && codec != ZSTD) return "codec " + codec;
        if (codec == ZSTD && !Zstd.available()) return "zstd entry, libzstd not loaded";
        byte[] k = key.bytes();
        for (int i = 0; i < 32; i++) if (file.get(ValueLayout.JAVA_BYTE, 8 + i) != k[i]) return "another key";
        long raw = file.get(le64, 40), storedLength = file.get(le64, 48);
        if (raw != rawLength) return "raw length " + raw + ", expected " + rawLength;
        if (storedLength != file.byteSize() - HEADER) return "stored length " + storedLength + " in a file of " + file.byteSize();
        if (codec == RAW && storedLength != raw) return "raw entry of " + storedLength + " bytes for " + raw;
        if (file.get(le, 60) != 0) return "reserved bytes set";
        if (file.get(le, 56) != crc(file)) return "checksum mismatch";
        return null;
    }

    private static int crc(MemorySegment file) {
        var crc = new CRC32C();
        crc.update(file.asSlice(0, 56).asByteBuffer());
        crc.update(file.asSlice(HEADER).asByteBuffer());
        return (int) crc.getValue();
    }

    private MemorySegment corrupt(CacheKey key, Path p, String why) {
        corrupt.increment();
        misses.increment();
        try {
            Files.deleteIfExists(p);
        } catch (IOException e) {
            // removed by the next write over it
        }
        forget(key);
        return null;
    }

    private void forget(CacheKey key) {
        Entry e = entries.remove(key);
        if (e != null) stored.addAndGet(-e.size);
    }

    /** Marks the entry used by this run (its file time too, the first time, for later runs' eviction order). */
    private void touch(CacheKey key, Path p) {
        long now = clock.getAsLong();
        Entry e = entries.get(key);
        if (e == null) {
            try {
                long size = Files.size(p);
                if (entries.putIfAbsent(key, e = new Entry(size, now)) == null) stored.addAndGet(size); // written by another service
            } catch (IOException gone) {
                return;
            }
        }
        if (e.lastUsed < runStart) {
            e.lastUsed = now;
            try {
                Files.setLastModifiedTime(p, FileTime.fromMillis(now));
            } catch (IOException ignored) {
                // the order of later runs' evictions only
            }
        } else if (e.lastUsed < now) {
            e.lastUsed = now;
        }
    }

    /**
     * Stores {@code raw} as entry {@code key}: compressed, checksummed, written to a temporary file and renamed into
     * place. Returns false when the entry was not admitted (the budget is held by entries this run uses) or could not be
     * written (counted; the cache is an optimization, a failed write never fails a sample).
     */
    @Override
    public boolean write(CacheKey key, MemorySegment raw) {
        Scratch s = scratch.get();
        long bound = compress ? Zstd.compressBound(raw.byteSize()) : raw.byteSize();
        MemorySegment file = s.file(HEADER + bound);
        long storedLength;
        if (compress) {
            MemorySegment src = raw;
            if (!raw.isNative()) {
                src = s.raw(raw.byteSize());
                MemorySegment.copy(raw, 0, src, 0, raw.byteSize());
            }
            storedLength = Zstd.compress(file.asSlice(HEADER, bound), src, level);
        } else {
            MemorySegment.copy(raw, 0, file, HEADER, raw.byteSize());
            storedLength = raw.byteSize();
        }
        file = file.asSlice(0, HEADER + storedLength);
        header(file, key, compress ? ZSTD : RAW, raw.byteSize(), storedLength);
        long size = file.byteSize();
        if (!makeRoom(key, size)) {
            rejected.increment();
            return false;
        }
        Path p = path(key);
        Path tmp = p.resolveSibling(p.getFileName() + "." + ProcessHandle.current().pid() + "." + Thread.currentThread().threadId() + ".tmp");
        try {
            if (!shards.contains(p.getParent())) {
                Files.createDirectories(p.getParent());
                shards.add(p.getParent());
            }
            try (var ch = FileChannel.open(tmp, StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING, StandardOpenOption.WRITE)) {
                ByteBuffer bb = file.asByteBuffer();
                while (bb.hasRemaining()) ch.write(bb);
            }
            try {
                Files.move(tmp, p, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, p, StandardCopyOption.REPLACE_EXISTING);
            }
        } catch (IOException | UncheckedIOException e) {
            writeFailures.increment();
            shards.remove(p.getParent()); // made again by the next write, should the folder have been removed under the cache
            stored.addAndGet(-size);
            try {
                Files.deleteIfExists(tmp);
            } catch (IOException ignored) {
                // a stale temporary file: removed by a later open after an hour
            }
            return false;
        }
        long now = clock.getAsLong();
        try {
            Files.setLastModifiedTime(p, FileTime.fromMillis(now)); // the file's time is its last use, on this cache's clock
        } catch (IOException ignored) {
            // the order of later runs' evictions only
        }
        Entry old = entries.put(key, new Entry(size, now));
        if (old != null) stored.addAndGet(-old.size); // rewritten (a corrupt entry's replacement, or a race with another thread)
        written.increment();
        rawWritten.add(raw.byteSize());
        storedWritten.add(size);
        return true;
    }

    /** {@link #write(CacheKey, MemorySegment)} of {@code src[offset, offset + length)}. */
    @Override
    public boolean write(CacheKey key, byte[] src, int offset, int length) {
        return write(key, MemorySegment.ofArray(src).asSlice(offset, length));
    }

    private static void header(MemorySegment file, CacheKey key, byte codec, long raw, long storedLength) {
        var le = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
        var le64 = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
        file.set(le, 0, MAGIC);
        file.set(ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN), 4, VERSION);
        file.set(ValueLayout.JAVA_BYTE, 6, codec);
        file.set(ValueLayout.JAVA_BYTE, 7, (byte) 0);
        MemorySegment.copy(key.bytes(), 0, file, ValueLayout.JAVA_BYTE, 8, 32);
        file.set(le64, 40, raw);
        file.set(le64, 48, storedLength);
        file.set(le, 60, 0);
        file.set(le, 56, crc(file));
    }

    /**
     * Reserves {@code size} stored bytes for {@code key}: at once when the budget has room, else after removing entries
     * this run has not used, least recently used first (down to 90% of the budget, so that removal runs in batches);
     * false when that cannot make room.
     */
    private boolean makeRoom(CacheKey key, long size) {
        if (size > budget) return false;
        while (true) {
            long now = stored.get();
            if (now + size <= budget) {
                if (stored.compareAndSet(now, now + size)) return true;
                continue;
            }
            synchronized (this) {
                if (stored.get() + size <= budget) continue;
                var old = new ArrayList<java.util.Map.Entry<CacheKey, Entry>>();
                for (var e : entries.entrySet()) if (e.getValue().lastUsed < runStart && !e.getKey().equals(key)) old.add(e);
                old.sort(Comparator.comparingLong(e -> e.getValue().lastUsed));
                long target = budget - budget / 10 - size;
                for (var e : old) {
                    if (stored.get() <= target) break;
                    if (!entries.remove(e.getKey(), e.getValue())) continue;
                    try {
                        Files.deleteIfExists(path(e.getKey()));
                    } catch (IOException ignored) {
                        // gone or not ours to remove: its bytes are no longer counted either way
                    }
                    stored.addAndGet(-e.getValue().size);
                    evicted.increment();
                }
                if (stored.get() + size > budget) return false;
            }
        }
    }

    public CacheStats stats() {
        return new CacheStats(hits.sum(), misses.sum(), corrupt.sum(), written.sum(), writeFailures.sum(), rawRead.sum(), storedRead.sum(),
                rawWritten.sum(), storedWritten.sum(), evicted.sum(), rejected.sum(), entries.size(), stored.get(), budget);
    }

    @Override public void close() {
        // nothing held open: entries are files, written whole
    }
}
