package dev.stoker.source;

import dev.stoker.core.UnservedMedia;
import dev.stoker.core.io.AtomicFiles;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;
import org.apache.commons.compress.archivers.tar.TarArchiveEntry;
import org.apache.commons.compress.archivers.tar.TarArchiveInputStream;

/**
 * Where the samples of a list of WebDataset tar shards lie: per sample its key, and the byte offset and length of
 * its JSON member's data and of each of its image and video members' data, in flat arrays (no object per sample): about
 * 8 bytes per sample, 12 per member, and the key's and suffixes' bytes; the shard of a sample is found from the
 * first sample of each shard. Built by one pass per shard with Commons Compress's tar reader ({@link Builder#scan}),
 * which reads each header and skips each member's data; saved and loaded as one binary file ({@link #write},
 * {@link #read}).
 *
 * <p>Samples (the WebDataset convention): a member's key is its path up to the first dot of its base name, its
 * suffix the rest ({@code a/b/x1.0.jpg}: key {@code a/b/x1}, suffix {@code 0.jpg}); consecutive members with one key
 * form one sample. Its record is the {@code json} member; its images the {@code jpg}, {@code jpeg}, {@code png},
 * {@code webp} members: one unnumbered ({@code key.jpg}), or numbered ({@code key.0.jpg}, {@code key.1.png}, …)
 * taken in numeric order; its videos (issue 29) the {@code mp4}, {@code webm}, {@code mkv}, {@code avi}, {@code mov}
 * members by the same rule ({@code key.mp4}, or {@code key.0.mp4}, {@code key.1.avi}, …), numbered apart from the
 * images; its audio clips (issue 32) the {@code wav}, {@code mp3}, {@code flac}, {@code ogg}, {@code opus}, {@code m4a},
 * {@code aac} members ({@link UnservedMedia#AUDIO}'s suffixes) by the same rule again, numbered apart from both.
 * Suffixes are matched in any case. Other members ({@code txt}, {@code cls}, …) are ignored, but not a video or audio
 * member named otherwise ({@code key.left.mp4}, {@code key.left.wav}): a trainer would read it as part of the sample, so
 * the sample is refused rather than served without it. The index records video and audio members whatever a job
 * serves; a job without video, or under a processor without audio (the Qwen-VL ones), refuses their samples when it
 * parses them ({@code SampleParser}). A sample that breaks a rule (such a member, no json member, two of
 * them, a json, image or audio member over {@value #MAX_MEMBER_BYTES} bytes, a video member over
 * {@value #MAX_VIDEO_MEMBER_BYTES} bytes, a member that is not a regular file, images or videos both numbered and
 * unnumbered or numbered twice, a key that comes again after other keys) keeps its place with the rule it broke,
 * reported when it is read.
 *
 * <p>Why the video bound differs: json and image members are read whole into memory, video members never (they are
 * read in {@link RangedObjectBytes} blocks where they are demuxed), so their bound is what the index's 32-bit lengths
 * hold, read unsigned: 4 GiB − 1 bytes, a 2-hour 1080p H.264 film at 4 Mb/s. A longer video is a file a record names.
 *
 * <p>A shard that is not a tar, or is cut short (a header or a member's data past its end), fails the whole index,
 * naming the shard and the byte; so do headers (long names, pax records) of more than {@value #MAX_HEADER_BYTES}
 * bytes before one member.
 *
 * <p>Threading: immutable once built; safe to share.
 */
final class TarIndex {
    /** The largest json or image member read. */
    static final long MAX_MEMBER_BYTES = 256L << 20;
    /** The most bytes of headers (a member's own, its GNU long name, its pax records) before one member's data. */
    static final int MAX_HEADER_BYTES = 1 << 20;
    /** The most images one sample may carry. */
    static final int MAX_IMAGES = 1024;
    /** The largest video member indexed: a length the index stores in 32 bits, read unsigned (4 GiB − 1). */
    static final long MAX_VIDEO_MEMBER_BYTES = 0xFFFF_FFFFL;
    /** The most videos one sample may carry. */
    static final int MAX_VIDEOS = 256;
    /** The most audio clips one sample may carry. */
    static final int MAX_AUDIOS = 256;

    private static final int MAGIC = 0x574B5453; // "STKW"
    /**
     * 2: samples with audio or video members are problems (an index of version 1 passed them as served; it is rebuilt).
     * 3: video members are indexed after the images, lengths read unsigned (an index of version 2 refused them; rebuilt).
     * 4: audio members are indexed after the videos (an index of version 3 refused them; rebuilt).
     */
    private static final int FILE_VERSION = 4;
    private static final Pattern IMAGE = Pattern.compile("(?:(\\d{1,9})\\.)?(jpg|jpeg|png|webp)");
    private static final Pattern VIDEO = Pattern.compile("(?:(\\d{1,9})\\.)?(mp4|webm|mkv|avi|mov)");
    private static final Pattern AUDIO = Pattern.compile("(?:(\\d{1,9})\\.)?(" + String.join("|", UnservedMedia.AUDIO.memberSuffixes()) + ")");

    private final String[] shards;
    private final int[] shardStart;   // first sample of each shard; shards + 1
    private final int[] firstMember;  // first member of each sample; samples + 1
    private final long[] offsets;     // per member: its data's offset in its shard
    private final int[] lengths;      // per member: its data's length, unsigned
    private final byte[] names;       // per sample: its key in UTF-8, then '\0' and the suffix of each member
    private final int[] nameStart;    // samples + 1
    private final int[] problemSamples; // ascending
    private final String[] problems;

    private TarIndex(String[] shards, int[] shardStart, int[] firstMember, long[] offsets, int[] lengths, byte[] names,
                     int[] nameStart, int[] problemSamples, String[] problems) {
        this.shards = shards;
        this.shardStart = shardStart;
        this.firstMember = firstMember;
        this.offsets = offsets;
        this.lengths = lengths;
        this.names = names;
        this.nameStart = nameStart;
        this.problemSamples = problemSamples;
        this.problems = problems;
    }

    /** Samples indexed, over all shards. */
    int size() { return firstMember.length - 1; }

    int shardCount() { return shards.length; }

    /** Shard {@code s}'s reference (relative to the source's root). */
    String shard(int s) { return shards[s]; }

    /** The shard sample {@code i} lies in. */
    int shardOf(int sample) {
        java.util.Objects.checkIndex(sample, size());
        int at = Arrays.binarySearch(shardStart, 0, shards.length, sample);
        if (at >= 0) {
            while (at + 1 < shards.length && shardStart[at + 1] == sample) at++; // shards without samples
            return at;
        }
        return -at - 2;
    }

    /** Samples in shard {@code s}. */
    int samplesIn(int shard) { return shardStart[shard + 1] - shardStart[shard]; }

    /** Sample {@code i}'s key. */
    String key(int sample) {
        int from = nameStart[sample], to = nameStart[sample + 1];
        int end = from;
        while (end < to && names[end] != 0) end++;
        return new String(names, from, end - from, StandardCharsets.UTF_8);
    }

    /**
     * Sample {@code i}'s members' names: its json member first, then its images in order, then its videos in order, then
     * its audio clips in order (none for a sample with a problem).
     */
    List<String> memberNames(int sample) {
        String key = key(sample);
        int from = nameStart[sample], to = nameStart[sample + 1];
        var out = new ArrayList<String>(firstMember[sample + 1] - firstMember[sample]);
        int p = from;
        while (p < to && names[p] != 0) p++;
        while (p < to) {
            int start = ++p;
            while (p < to && names[p] != 0) p++;
            out.add(key + "." + new String(names, start, p - start, StandardCharsets.UTF_8));
        }
        return out;
    }

    /** The first of sample {@code i}'s members; its last is {@code firstMember(i + 1) - 1}. */
    int firstMember(int sample) { return firstMember[sample]; }

    long offset(int member) { return offsets[member]; }

    long length(int member) { return Integer.toUnsignedLong(lengths[member]); }

    /** Whether a sample of the index has a video member (read once; a job with {@code --video auto} asks). */
    boolean hasVideoMembers() {
        for (int i = 0; i < size(); i++)
            for (String m : memberNames(i)) if (isVideoName(m)) return true;
        return false;
    }

    /** Whether a member's name (or suffix) is a video's: its last dot-part is a video suffix, in any case. */
    static boolean isVideoName(String name) {
        String ext = name.substring(name.lastIndexOf('.') + 1).toLowerCase(Locale.ROOT);
        return switch (ext) {
            case "mp4", "webm", "mkv", "avi", "mov" -> true;
            default -> false;
        };
    }

    /** Whether a member's name (or suffix) is an audio clip's: its last dot-part is an audio suffix, in any case. */
    static boolean isAudioName(String name) {
        return UnservedMedia.ofMemberSuffix(name) == UnservedMedia.AUDIO;
    }

    /** The rule sample {@code i} breaks (a sentence naming it), or null. */
    String problem(int sample) {
        int at = Arrays.binarySearch(problemSamples, sample);
        return at >= 0 ? problems[at] : null;
    }

    /** Samples with a problem. */
    int problemCount() { return problemSamples.length; }

    /** Heap the index holds per sample (arrays and name bytes; problem messages left out), for tests and benchmarks. */
    double bytesPerSample() {
        long b = 4L * shardStart.length + 4L * firstMember.length + 12L * offsets.length + names.length + 4L * nameStart.length
                + 4L * problemSamples.length;
        return size() == 0 ? 0 : (double) b / size();
    }

    // ------------------------------------------------------------------ scanning

    /** Builds an index shard by shard; a shard's pass that fails can be undone ({@link #mark}, {@link #rollback}) and run again. */
    static final class Builder {
        private final List<String> shards = new ArrayList<>();
        private final IntList shardStart = new IntList();
        private final IntList firstMember = new IntList();
        private final LongList offsets = new LongList();
        private final IntList lengths = new IntList();
        private final ByteList names = new ByteList();
        private final IntList nameStart = new IntList();
        private final IntList problemSamples = new IntList();
        private final List<String> problems = new ArrayList<>();
        private final Map<String, String> messages = new HashMap<>();
        private int samples;
        private int[] mark;

        /** Remembers the sizes before a shard's pass. */
        void mark() {
            mark = new int[] {samples, offsets.n, names.n, problemSamples.n, problems.size(), shards.size()};
        }

        /** Drops what was added since {@link #mark}. */
        void rollback() {
            samples = mark[0];
            firstMember.n = samples;
            nameStart.n = samples;
            offsets.n = mark[1];
            lengths.n = mark[1];
            names.n = mark[2];
            problemSamples.n = mark[3];
            while (problems.size() > mark[4]) problems.removeLast();
            while (shards.size() > mark[5]) shards.removeLast();
            shardStart.n = mark[5];
        }

        /**
         * Indexes one shard, read from {@code in} (the caller closes it), named {@code shard} (its reference) and
         * {@code label} (in ids and messages), {@code size} bytes long by its stat. A shard that is not a well-formed
         * tar throws {@link RecordIndex.Malformed}; a stream that breaks, a plain IOException (read it again).
         */
        void scan(String shard, String label, InputStream in, long size) throws IOException {
            shards.add(shard);
            shardStart.add(samples);
            var counting = new Counting(new BufferedInputStream(in, 64 * 1024));
            var tar = new TarArchiveInputStream(counting, "UTF-8");
            Group group = null;
            Set<String> keys = new HashSet<>();
            while (true) {
                TarArchiveEntry e;
                try {
                    e = tar.getNextEntry();
                } catch (IOException | RuntimeException x) {
                    if (counting.failure != null) throw new IOException("reading shard " + label + " broke at byte " + counting.count + ": " + x.getMessage(), x);
                    String why = x instanceof HeadersTooLong ? x.getMessage() : "it is truncated or not a tar (" + x.getMessage() + ")";
                    throw new RecordIndex.Malformed("shard " + label + " cannot be indexed at byte " + counting.count + ": " + why, x);
                }
                if (e == null) break;
                long dataOffset = counting.count;
                long length = e.getSize();
                if (length < 0) throw new RecordIndex.Malformed("shard " + label + ": member " + e.getName() + " at byte " + dataOffset + " has a negative size");
                counting.limit = dataOffset + ((length + 511) & ~511L) + MAX_HEADER_BYTES;
                if (e.isFile() && !e.isSparse()) counting.skippable(dataOffset, dataOffset + length);
                if (e.isFile() && dataOffset + length > size)
                    throw new RecordIndex.Malformed("shard " + label + " is truncated: member " + e.getName() + "'s " + length + " bytes at byte "
                            + dataOffset + " run past its end at byte " + size);
                if (e.isDirectory()) continue;
                String name = e.getName();
                int slash = name.lastIndexOf('/');
                int dot = name.indexOf('.', slash + 1);
                String key = dot < 0 ? name : name.substring(0, dot);
                String suffix = dot < 0 ? "" : name.substring(dot + 1);
                if (group == null || !group.key.equals(key)) {
                    if (group != null) add(group, label);
                    group = new Group(key, !keys.add(key));
                }
                group.members.add(new Member(name, suffix, dataOffset, length, e.isFile() && !e.isSparse()));
            }
            if (group != null) add(group, label);
            if (counting.count > size)
                throw new IOException("shard " + label + " has more than the " + size + " bytes it had when listed (it changed while it was indexed?)");
        }

        private record Member(String name, String suffix, long offset, long length, boolean regular) { }

        private static final class Group {
            final String key;
            final boolean repeated;
            final List<Member> members = new ArrayList<>(4);

            Group(String key, boolean repeated) {
                this.key = key;
                this.repeated = repeated;
            }
        }

        /** One kind's members of a sample (images, or videos): one unnumbered or several numbered. */
        private static final class Numbered {
            final String kind;
            Member unnumbered;
            final java.util.TreeMap<Integer, Member> numbered = new java.util.TreeMap<>();

            Numbered(String kind) { this.kind = kind; }

            /** Adds {@code m} ({@code number} null: unnumbered); the rule it breaks, or null. */
            String add(Member m, String number, String key, String ext) {
                if (number == null) {
                    String problem = unnumbered == null ? null : "has two unnumbered " + kind + "s, " + unnumbered.name + " and " + m.name
                            + " (number them: " + key + ".0." + ext + ", " + key + ".1." + ext + ", …)";
                    unnumbered = m;
                    return problem;
                }
                int k = Integer.parseInt(number);
                var before = numbered.put(k, m);
                return before == null ? null : "has two " + kind + "s numbered " + k + ", " + before.name + " and " + m.name;
            }

            /** The rule the members break together, or null. */
            String check(int max) {
                if (unnumbered != null && !numbered.isEmpty())
                    return "has both an unnumbered " + kind + " (" + unnumbered.name + ") and numbered ones (" + numbered.firstEntry().getValue().name + ", …)";
                if (numbered.size() + (unnumbered != null ? 1 : 0) > max) return "has " + numbered.size() + " " + kind + "s, more than " + max;
                return null;
            }

            void addTo(Builder b) {
                if (unnumbered != null) b.addMember(unnumbered);
                for (var m : numbered.values()) b.addMember(m);
            }
        }

        private void add(Group g, String label) {
            Member json = null;
            String problem = g.repeated ? "comes again after other keys (a sample's members must be consecutive)" : null;
            var images = new Numbered("image");
            var videos = new Numbered("video");
            var audios = new Numbered("audio clip");
            for (var m : g.members) {
                String s = m.suffix.toLowerCase(Locale.ROOT);
                boolean isJson = s.equals("json");
                var image = IMAGE.matcher(s);
                boolean isImage = !isJson && image.matches();
                var video = VIDEO.matcher(s);
                boolean isVideo = !isJson && !isImage && video.matches();
                boolean strayVideo = !isJson && !isImage && !isVideo && isVideoName(s);
                var audio = AUDIO.matcher(s);
                boolean isAudio = !isJson && !isImage && !isVideo && !strayVideo && audio.matches();
                boolean strayAudio = !isJson && !isImage && !isVideo && !strayVideo && !isAudio && isAudioName(s);
                boolean known = isJson || isImage || isVideo || strayVideo || isAudio || strayAudio;
                var media = known ? null : UnservedMedia.ofMemberSuffix(s);
                if (!known && media == null) continue;
                if (problem != null) continue;
                if (media != null) problem = "has a ." + m.suffix + " member: " + media.notSupported(); // by suffix, not name: a whole set shares one message
                else if (strayAudio) problem = "has audio member " + m.name + ", named neither " + g.key + "." + s.substring(s.lastIndexOf('.') + 1)
                        + " nor " + g.key + ".N." + s.substring(s.lastIndexOf('.') + 1) + " (a clip Stoker cannot place)";
                else if (strayVideo) problem = "has video member " + m.name + ", named neither " + g.key + "." + s.substring(s.lastIndexOf('.') + 1)
                        + " nor " + g.key + ".N." + s.substring(s.lastIndexOf('.') + 1) + " (a video Stoker cannot place)";
                else if (!m.regular) problem = "has member " + m.name + ", which is not a regular file (only regular, non-sparse files are read)";
                else if (isVideo && m.length > MAX_VIDEO_MEMBER_BYTES)
                    problem = "has video member " + m.name + " of " + m.length + " bytes, over the limit of " + MAX_VIDEO_MEMBER_BYTES
                            + " bytes (4 GiB - 1; a longer video is a file a record names)";
                else if (!isVideo && m.length > MAX_MEMBER_BYTES)
                    problem = "has member " + m.name + " of " + m.length + " bytes, over the limit of " + MAX_MEMBER_BYTES + " bytes (256 MiB)";
                else if (m.name.indexOf('\0') >= 0) problem = "has a member name with a NUL character";
                else if (isJson) {
                    if (json != null) problem = "has two json members, " + json.name + " and " + m.name;
                    json = m;
                } else if (isImage) {
                    problem = images.add(m, image.group(1), g.key, "jpg");
                } else if (isVideo) {
                    problem = videos.add(m, video.group(1), g.key, "mp4");
                } else {
                    problem = audios.add(m, audio.group(1), g.key, "wav");
                }
            }
            if (problem == null) problem = images.check(MAX_IMAGES);
            if (problem == null) problem = videos.check(MAX_VIDEOS);
            if (problem == null) problem = audios.check(MAX_AUDIOS);
            if (problem == null && json == null) {
                var suffixes = new java.util.LinkedHashSet<String>();
                for (var m : g.members) suffixes.add("." + m.suffix);
                problem = "has no .json member (its members: " + String.join(", ", suffixes.stream().limit(8).toList())
                        + (suffixes.size() > 8 ? ", …" : "") + ")";
            }
            firstMember.add(offsets.n);
            nameStart.add(names.n);
            names.add(g.key.replace('\0', '\uFFFD').getBytes(StandardCharsets.UTF_8));
            if (problem != null) {
                problemSamples.add(samples);
                problems.add(messages.size() < 10_000 ? messages.computeIfAbsent(problem, p -> p) : problem);
            } else {
                addMember(json);
                images.addTo(this);
                videos.addTo(this);
                audios.addTo(this);
            }
            if (samples == Integer.MAX_VALUE - 8) throw new IllegalStateException("more than " + (Integer.MAX_VALUE - 8) + " samples");
            samples++;
        }

        private void addMember(Member m) {
            offsets.add(m.offset);
            lengths.add((int) m.length);
            names.add((byte) 0);
            names.add(m.suffix.getBytes(StandardCharsets.UTF_8));
        }

        TarIndex build() {
            var starts = Arrays.copyOf(shardStart.toArray(), shards.size() + 1);
            starts[shards.size()] = samples;
            var first = Arrays.copyOf(firstMember.toArray(), samples + 1);
            first[samples] = offsets.n;
            var nstart = Arrays.copyOf(nameStart.toArray(), samples + 1);
            nstart[samples] = names.n;
            return new TarIndex(shards.toArray(String[]::new), starts, first, offsets.toArray(), lengths.toArray(), names.toArray(), nstart,
                    problemSamples.toArray(), problems.toArray(String[]::new));
        }
    }

    /** Thrown by {@link Counting} when the tar reader reads more than {@link #MAX_HEADER_BYTES} of headers before a member. */
    private static final class HeadersTooLong extends IOException {
        HeadersTooLong(String message) { super(message); }
    }

    /**
     * Counts the bytes the tar reader takes, remembers a failure of the stream below, and bounds the headers before a
     * member. It also skips members' data for the tar reader: Commons Compress skips a member by reading it (through
     * commons-io's {@code IOUtils.skip}), so a read inside the data of the member just returned — which the scan never
     * reads otherwise — is a {@link InputStream#skip} of the stream below instead, and the reader's scratch buffer is left
     * as it is. A local shard's stream skips by seeking: indexing it reads its headers, not its (multi-GB video) members.
     */
    private static final class Counting extends FilterInputStream {
        long count;
        long limit = MAX_HEADER_BYTES;
        IOException failure;
        private long skipFrom, skipTo;

        Counting(InputStream in) { super(in); }

        /** The data of the member just returned lies in [from, to): the tar reader reads there only to skip it. */
        void skippable(long from, long to) {
            skipFrom = from;
            skipTo = to;
        }

        @Override
        public int read() throws IOException {
            byte[] one = new byte[1];
            int n = read(one, 0, 1);
            return n < 0 ? -1 : one[0] & 0xff;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            if (count >= limit)
                throw new HeadersTooLong("more than " + MAX_HEADER_BYTES + " bytes of headers (long names, pax records) before one member");
            int n;
            try {
                if (count >= skipFrom && count < skipTo) {
                    long skipped = in.skip(Math.min(len, skipTo - count));
                    if (skipped > 0) {
                        count += skipped;
                        return (int) skipped;
                    }
                }
                n = in.read(b, off, (int) Math.min(len, limit - count));
            } catch (IOException e) {
                failure = e;
                throw e;
            }
            if (n > 0) count += n;
            return n;
        }

        @Override
        public long skip(long n) throws IOException {
            long s;
            try {
                s = in.skip(Math.max(0, Math.min(n, limit - count)));
            } catch (IOException e) {
                failure = e;
                throw e;
            }
            if (s > 0) count += s;
            return s;
        }

        @Override
        public boolean markSupported() { return false; }
    }

    // ------------------------------------------------------------------ the file

    /** Saves the index to {@code file} for {@code key} (written beside it, then moved over it). */
    void write(Path file, String key) throws IOException {
        AtomicFiles.write(file, tmp -> {
            try (var out = new DataOutputStream(new BufferedOutputStream(Files.newOutputStream(tmp), 1 << 20))) {
                out.writeInt(MAGIC);
                out.writeInt(FILE_VERSION);
                writeString(out, key);
                out.writeInt(shards.length);
                out.writeInt(size());
                out.writeInt(offsets.length);
                out.writeInt(names.length);
                out.writeInt(problems.length);
                for (String s : shards) writeString(out, s);
                for (int v : shardStart) out.writeInt(v);
                for (int v : firstMember) out.writeInt(v);
                for (long v : offsets) out.writeLong(v);
                for (int v : lengths) out.writeInt(v);
                for (int v : nameStart) out.writeInt(v);
                out.write(names);
                for (int v : problemSamples) out.writeInt(v);
                for (String p : problems) writeString(out, p);
            }
        });
    }

    private static void writeString(DataOutputStream out, String s) throws IOException {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        out.writeInt(b.length);
        out.write(b);
    }

    /**
     * Loads an index saved for {@code key}; null when the file is of another key or version. A file cut short, or
     * whose arrays do not fit together, is refused (IOException).
     */
    static TarIndex read(Path file, String key) throws IOException {
        long size = Files.size(file);
        try (var in = new DataInputStream(new BufferedInputStream(Files.newInputStream(file), 1 << 20))) {
            if (in.readInt() != MAGIC || in.readInt() != FILE_VERSION) return null;
            if (!key.equals(readString(in, size))) return null;
            int shardCount = count(in, size, 4), samples = count(in, size, 8), members = count(in, size, 12), nameBytes = count(in, size, 1),
                    problemCount = count(in, size, 8);
            var shards = new String[shardCount];
            for (int i = 0; i < shardCount; i++) shards[i] = readString(in, size);
            int[] shardStart = ints(in, shardCount + 1);
            int[] firstMember = ints(in, samples + 1);
            long[] offsets = new long[members];
            for (int i = 0; i < members; i++) offsets[i] = in.readLong();
            int[] lengths = ints(in, members);
            int[] nameStart = ints(in, samples + 1);
            byte[] names = in.readNBytes(nameBytes);
            if (names.length != nameBytes) throw new EOFException();
            int[] problemSamples = ints(in, problemCount);
            var problems = new String[problemCount];
            for (int i = 0; i < problemCount; i++) problems[i] = readString(in, size);
            if (in.read() >= 0) throw new IOException("index " + file + " has bytes after its end");
            check(file, ascending(shardStart, 0, samples) && ascending(firstMember, 0, members) && ascending(nameStart, 0, nameBytes)
                    && strictlyAscending(problemSamples, samples));
            for (int i = 0; i < members; i++) check(file, offsets[i] >= 0);
            checkLengths(file, firstMember, lengths, names, nameStart);
            return new TarIndex(shards, shardStart, firstMember, offsets, lengths, names, nameStart, problemSamples, problems);
        } catch (EOFException e) {
            throw new IOException("index " + file + " is cut short", e);
        }
    }

    /** Each json and image member within {@link #MAX_MEMBER_BYTES} (video members' unsigned lengths are their bound), by its suffix. */
    private static void checkLengths(Path file, int[] firstMember, int[] lengths, byte[] names, int[] nameStart) throws IOException {
        for (int sample = 0; sample + 1 < firstMember.length; sample++) {
            int m = firstMember[sample], p = nameStart[sample], to = nameStart[sample + 1];
            while (p < to && names[p] != 0) p++;
            while (p < to) {
                int start = ++p;
                while (p < to && names[p] != 0) p++;
                check(file, m < firstMember[sample + 1]);
                boolean video = isVideoName(new String(names, start, p - start, StandardCharsets.UTF_8));
                check(file, video || (lengths[m] >= 0 && lengths[m] <= MAX_MEMBER_BYTES));
                m++;
            }
            check(file, m == firstMember[sample + 1]);
        }
    }

    private static void check(Path file, boolean ok) throws IOException {
        if (!ok) throw new IOException("index " + file + " is malformed");
    }

    private static int count(DataInputStream in, long fileSize, int bytesEach) throws IOException {
        int n = in.readInt();
        if (n < 0 || (long) n * bytesEach > fileSize) throw new IOException("index count " + n + " does not fit the file's " + fileSize + " bytes");
        return n;
    }

    private static int[] ints(DataInputStream in, int n) throws IOException {
        int[] a = new int[n];
        for (int i = 0; i < n; i++) a[i] = in.readInt();
        return a;
    }

    private static String readString(DataInputStream in, long fileSize) throws IOException {
        int n = in.readInt();
        if (n < 0 || n > fileSize) throw new IOException("string of " + n + " bytes in an index of " + fileSize);
        byte[] b = in.readNBytes(n);
        if (b.length != n) throw new EOFException();
        return new String(b, StandardCharsets.UTF_8);
    }

    private static boolean ascending(int[] a, int first, int last) {
        if (a.length == 0 || a[0] != first || a[a.length - 1] != last) return false;
        for (int i = 1; i < a.length; i++) if (a[i] < a[i - 1]) return false;
        return true;
    }

    private static boolean strictlyAscending(int[] a, int bound) {
        for (int i = 0; i < a.length; i++) if (a[i] < 0 || a[i] >= bound || (i > 0 && a[i] <= a[i - 1])) return false;
        return true;
    }

    @Override
    public String toString() {
        return "TarIndex[" + shards.length + " shards, " + size() + " samples, " + offsets.length + " members, " + problemSamples.length + " with problems]";
    }

    // ------------------------------------------------------------------ growable arrays

    private static final class LongList {
        long[] a = new long[1024];
        int n;

        void add(long v) {
            if (n == a.length) a = Arrays.copyOf(a, grow(n));
            a[n++] = v;
        }

        long[] toArray() { return Arrays.copyOf(a, n); }
    }

    private static final class IntList {
        int[] a = new int[1024];
        int n;

        void add(int v) {
            if (n == a.length) a = Arrays.copyOf(a, grow(n));
            a[n++] = v;
        }

        int[] toArray() { return Arrays.copyOf(a, n); }
    }

    private static final class ByteList {
        byte[] a = new byte[16 * 1024];
        int n;

        void add(byte v) {
            if (n == a.length) a = Arrays.copyOf(a, grow(n));
            a[n++] = v;
        }

        void add(byte[] v) {
            while (a.length - n < v.length) a = Arrays.copyOf(a, grow(a.length));
            System.arraycopy(v, 0, a, n, v.length);
            n += v.length;
        }

        byte[] toArray() { return Arrays.copyOf(a, n); }
    }

    private static int grow(int n) {
        if (n >= Integer.MAX_VALUE - 8) throw new IllegalStateException("an index of more than " + (Integer.MAX_VALUE - 8) + " entries");
        return (int) Math.min(Integer.MAX_VALUE - 8, n + (n >> 1) + 16);
    }
}
