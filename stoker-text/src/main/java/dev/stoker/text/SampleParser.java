package dev.stoker.text;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.SampleException;
import dev.stoker.core.UnservedMedia;
import dev.stoker.text.Message.Role;
import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CoderResult;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * Turns one dataset record (a JSON object, or one raw JSONL line) into a {@link ChatSample}. The layout is
 * detected per record from its keys; {@code docs/data-formats.md} shows an example of each.
 *
 * <p><b>Detection.</b> {@code conversations} with a top-level {@code image}, or with no image list, is LLaVA;
 * {@code conversations} with {@code images} is ShareGPT as LLaMA-Factory reads it; {@code messages} is typed
 * HF content when any {@code content} is an array, else string content read as ms-swift and LLaMA-Factory do.
 * For {@code conversations} the key decides because the two trainers split placeholders the same way and
 * differ only in stripping: qwen-vl-finetune's data uses {@code image}, LLaMA-Factory's uses {@code images}.
 * (Until this rule, {@code images} was an alias of {@code image} under the LLaVA rule, which stripped text that
 * LLaMA-Factory keeps and so gave other tokens than it trains on.)
 *
 * <p><b>LLaVA / qwen-vl-finetune</b>: {@code {"id"?, "image"?: str | [str], "conversations": [{"from", "value"}]}}.
 * Converted as the official {@code _build_messages} does (spec §10): {@code from == "human"} becomes
 * {@code user}; user values are split on {@code <image>}, text segments are {@code strip()}ped and empty
 * ones dropped; every other {@code from} becomes {@code assistant} with its value kept verbatim (an
 * {@code <image>} there stays literal text, as upstream). Two deliberate extensions: {@code "system"}
 * becomes a system turn (upstream would make it an assistant turn and train on it) and {@code "user"}
 * is accepted as {@code "human"}. Text-only {@code conversations} (no image list) take this rule too.
 *
 * <p><b>ShareGPT (LLaMA-Factory)</b>: {@code {"id"?, "images": str | [str], "conversations": [{"from", "value"}]}}.
 * <b>ms-swift / LLaMA-Factory openai style</b>: {@code {"id"?, "images"?: str | [str], "messages": [{"role",
 * "content": str}]}}. Each {@code <image>}, in any turn, is replaced in place by the next listed image and the
 * text around it is kept exactly as it is, as LLaMA-Factory's {@code mm_plugin} and ms-swift do; only empty
 * segments are dropped (they render nothing). ShareGPT roles are {@code human}/{@code user},
 * {@code gpt}/{@code assistant} and {@code system}; {@code messages} roles are {@code system}, {@code user},
 * {@code assistant}. Any other role is refused, tool roles ({@code observation}, {@code function_call},
 * {@code tool}) as tool turns, which are not supported.
 *
 * <p><b>HF typed messages</b>: {@code {"id"?, "messages": [{"role", "content": str | [item]}]}} with items
 * {@code {"type":"text","text"}} or images ({@code type == "image"} or a key {@code image} /
 * {@code image_url}; the reference is {@code image}, {@code image_url} (string or {@code {"url"}}),
 * {@code url} or {@code path}). Text items are verbatim ({@code <image>} in one is literal text, as the HF
 * template renders it). A non-empty top-level {@code images}/{@code image} list is refused (it would be unused),
 * and so is an {@code <image>} placeholder in a string content of the same record.
 *
 * <p><b>Placeholders.</b> The number of {@code <image>} placeholders (LLaVA: in human turns; otherwise in all
 * turns) must equal the number of listed images, so a record with none, or with placeholders and no list, is
 * refused rather than trained with images missing or as literal text; the error gives both counts.
 *
 * <p>Also refused: every medium Stoker does not serve ({@link UnservedMedia}: audio and video), wherever a trainer
 * would read it: its placeholder ({@code <audio>}, {@code <video>}) wherever {@code <image>} placeholders are read,
 * a typed item of its type or with its key ({@code {"type": "input_audio"}}, {@code {"video": …}}), a non-empty
 * top-level field ({@code audio}/{@code audios}, {@code video}/{@code videos}); otherwise such a record would train as
 * text with the medium dropped and its placeholder tokenized as text. As for {@code <image>}, a placeholder inside a
 * typed text item is literal text. Also refused: a non-empty {@code tools} field, both {@code image} and
 * {@code images}, and anything mistyped. Every error is a {@link SampleException} at stage {@code MANIFEST}
 * naming the sample and the JSON path of the field. The sample id is the record's {@code "id"} (string or
 * number) when present, else the caller's.
 *
 * <p><b>Video</b> (issue 29) is read only by a parser made with {@link Videos#ACCEPT}; the default parser refuses it
 * as above, with the same messages. Why an option: Stoker cannot yet decode a video into {@code pixel_values_videos},
 * so a product parser that accepted video records would hand the pipeline samples it cannot serve; the option is
 * turned on where decoding is wired (and by the tests). When accepted, videos are read wherever images are:
 * {@code <video>} placeholders are split out exactly as {@code <image>} ones (same strip rule per layout) and take the
 * record's top-level list in order — {@code video} (string or list) in the LLaVA / qwen-vl-finetune layout,
 * {@code videos} in ShareGPT (a {@code conversations} record with {@code images} or {@code videos} is ShareGPT), and
 * {@code videos} or {@code video} with string {@code messages}; each entry is a file path / URL or a list of frame
 * image paths. Typed HF items are {@code {"type": "video", "video": PATH | URL | [frame paths], KEY: VALUE…}} (or a
 * {@code video}, {@code url} or {@code path} key); every other key is kept as a per-item option
 * ({@link Message.Video#options()}: a JSON number or string, at most {@value #MAX_VIDEO_OPTIONS} per item). The number
 * of {@code <video>} placeholders must equal the number of listed videos, as for images. Images and videos keep their
 * order in the text: the template emits them, and the processor numbers the rows of each kind, in that order.
 *
 * <p><b>Audio</b> (issue 32) is read only by a parser made with {@link Audios#ACCEPT} (for an audio-capable processor:
 * Qwen2-Audio, Qwen2.5-Omni, Qwen3-Omni); the default parser refuses it as above, as the Qwen-VL processors take none.
 * When accepted, audio clips are read as LLaMA-Factory's {@code mm_plugin} and the HF templates read them: an
 * {@code <audio>} placeholder, in any turn and under the same strip rule as {@code <image>}, takes the next entry of
 * the record's top-level {@code audios} (or {@code audio}: a string or a list of strings, paths relative to the
 * manifest as for images, or URIs); a {@code conversations} record with an audio list and no {@code image}/{@code video}
 * list is ShareGPT. Typed HF items are {@code {"type": "audio", "audio": PATH | URI}} (or an {@code audio},
 * {@code audio_url} (string or {@code {"url"}}), {@code url} or {@code path} key), every other key kept as a per-item
 * option as for video; {@code input_audio} (inline base64 data) is refused. The number of {@code <audio>} placeholders
 * must equal the number of listed clips. {@code use_audio_in_video} (a JSON boolean) is read on a typed video item
 * and, for every video of the record, as a top-level key; since the HF processors and the models' {@code get_rope_index}
 * take one such flag per call, the videos of one record must agree on it, and a video whose audio is asked for must be
 * a file (a frame list has no audio track). A parser that refuses audio refuses {@code use_audio_in_video: true}.
 *
 * <p>Threading: instances are immutable and may be shared; {@link #parseLine} allocates its decoder per call.
 */
public final class SampleParser {
    private static final String IMAGE_TOKEN = "<image>";
    private static final String VIDEO_TOKEN = UnservedMedia.VIDEO.placeholder();
    private static final String AUDIO_TOKEN = UnservedMedia.AUDIO.placeholder();
    /** Most per-item keys of one audio item (qwen-omni-utils reads 3: audio, audio_start, audio_end). */
    public static final int MAX_AUDIO_OPTIONS = 32;
    /** Most per-item keys of one video item: qwen-vl-utils reads 11, transformers 6. */
    public static final int MAX_VIDEO_OPTIONS = 32;
    /** Longest per-item key, and longest string value, in characters. */
    public static final int MAX_VIDEO_OPTION_CHARS = 256;
    /** Most frames of a video given as a list of frame images (ten times a sampler's default most frames, 768). */
    public static final int MAX_VIDEO_FRAMES = 8192;

    /** Whether a parser reads video records or refuses them as {@link UnservedMedia#VIDEO}. */
    public enum Videos {
        /** Refused through {@link UnservedMedia}, as every reader does while Stoker cannot decode video: the default. */
        REFUSE,
        /** Read into {@link Message.Video} parts: only where decoding is wired (and in tests). */
        ACCEPT
    }

    /** Whether a parser reads audio records or refuses them as {@link UnservedMedia#AUDIO}. */
    public enum Audios {
        /** Refused through {@link UnservedMedia}, as the Qwen-VL processors take no audio: the default. */
        REFUSE,
        /** Read into {@link Message.Audio} parts: for an audio-capable processor. */
        ACCEPT
    }

    private final ObjectMapper json = new ObjectMapper()
            .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);
    private final boolean acceptVideo;
    private final boolean acceptAudio;
    private final List<UnservedMedia> unserved;
    /** Why this job does not take video, said where a video record is refused; null: the plain "not supported". */
    private final String videoRefusal;

    /** A parser that refuses video records ({@link Videos#REFUSE}). */
    public SampleParser() { this(Videos.REFUSE); }

    /** A parser that reads or refuses video records as {@code videos} says. */
    public SampleParser(Videos videos) { this(videos, null); }

    /**
     * A parser that reads or refuses video records as {@code videos} says; a refused video record's error also says
     * {@code videoRefusal} (why this job takes no video: a trainer's transformers release whose video rules Stoker does
     * not know, for one), or only that video is not supported when it is null.
     *
     * @throws IllegalArgumentException for a reason given with {@link Videos#ACCEPT}, which refuses no video
     */
    public SampleParser(Videos videos, String videoRefusal) { this(videos, videoRefusal, Audios.REFUSE); }

    /**
     * {@link #SampleParser(Videos, String)} that also reads or refuses audio records as {@code audios} says.
     *
     * @throws IllegalArgumentException for a reason given with {@link Videos#ACCEPT}, which refuses no video
     */
    public SampleParser(Videos videos, String videoRefusal, Audios audios) {
        this.acceptVideo = java.util.Objects.requireNonNull(videos, "videos") == Videos.ACCEPT;
        this.acceptAudio = java.util.Objects.requireNonNull(audios, "audios") == Audios.ACCEPT;
        if (acceptVideo && videoRefusal != null) throw new IllegalArgumentException("a parser that reads video refuses none: no reason to give");
        var list = new ArrayList<UnservedMedia>(List.of(UnservedMedia.values()));
        if (acceptVideo) list.remove(UnservedMedia.VIDEO);
        if (acceptAudio) list.remove(UnservedMedia.AUDIO);
        this.unserved = List.copyOf(list);
        this.videoRefusal = videoRefusal;
    }

    /** Whether this parser reads video records. */
    public boolean acceptsVideo() { return acceptVideo; }

    /** Whether this parser reads audio records. */
    public boolean acceptsAudio() { return acceptAudio; }

    /** Parses one JSONL line given as raw bytes; the bytes must be valid UTF-8. */
    public ChatSample parseLine(byte[] line, String fallbackId) {
        return parseLine(line, 0, line.length, fallbackId);
    }

    /** Parses {@code length} bytes at {@code offset} as one JSON object in strict UTF-8. */
    public ChatSample parseLine(byte[] buf, int offset, int length, String fallbackId) {
        var text = decodeUtf8(buf, offset, length, fallbackId);
        JsonNode node;
        try {
            node = json.readTree(text);
        } catch (JsonProcessingException e) {
            throw error(fallbackId, "malformed JSON: " + readable(e.getOriginalMessage())
                    + (e.getLocation() == null ? "" : " at column " + e.getLocation().getColumnNr()));
        }
        if (node == null || node.isMissingNode()) throw error(fallbackId, "empty line, expected a JSON object");
        return parse(node, fallbackId);
    }

    /**
     * Parses a record whose source carries its images ({@code embedded}: their names, in the order the
     * record's images take them; empty: the record names its images by reference, as {@link #parseLine}).
     * A record without an image list uses the embedded images as its list (under {@code image} in the
     * LLaVA layout, {@code images} with {@code messages}); a record with one, or with typed image items,
     * must name as many as are embedded, and the embedded ones take their places in order. For a source that carries
     * no video: one that may carries them through {@link #parseRecord(byte[], String, List, List)}.
     */
    public ChatSample parseRecord(byte[] json, String fallbackId, List<String> embedded) {
        return parseRecord(json, fallbackId, embedded, List.of());
    }

    /**
     * {@link #parseRecord(byte[], String, List)} for a source that also carries videos ({@code videos}: their names, in
     * the order the record's videos take them; a tar's video members, a Parquet video column). Videos are placed as
     * images are, apart from them: a record without a video list and without typed video items uses the embedded videos
     * as its list ({@code video} in the LLaVA layout, {@code videos} in ShareGPT, beside {@code images}, and with
     * {@code messages}); one with a list, or with typed video items, must name as many as are embedded (a typed item
     * {@code {"type": "video"}} naming none is named after the embedded video of its place), and the embedded ones take
     * their places in order, each keeping its per-item options. A parser that refuses video refuses a record that
     * carries any, naming the first (as it refuses a record that lists one).
     */
    public ChatSample parseRecord(byte[] json, String fallbackId, List<String> embedded, List<String> videos) {
        return parseRecord(json, fallbackId, embedded, videos, List.of());
    }

    /**
     * {@link #parseRecord(byte[], String, List, List)} for a source that also carries audio clips ({@code audios}: their
     * names, in the order the record's clips take them; a tar's audio members, a Parquet audio column; issue 32). Clips are
     * placed as videos are: a record without an {@code audio}/{@code audios} list and without typed audio items uses the
     * carried clips as its {@code audios} list (taken by its {@code <audio>} placeholders); one with a list, or with typed
     * audio items, must name as many as are carried (a typed item {@code {"type": "audio"}} naming none is named after the
     * carried clip of its place), and the carried ones take their places in order, each keeping its per-item keys. A parser
     * that refuses audio (a Qwen-VL processor's) refuses a record that carries any, naming the first, with the refusal's
     * usual wording ({@link UnservedMedia#notSupported()}).
     */
    public ChatSample parseRecord(byte[] json, String fallbackId, List<String> embedded, List<String> videos, List<String> audios) {
        if (embedded.isEmpty() && videos.isEmpty() && audios.isEmpty()) return parseLine(json, fallbackId);
        var text = decodeUtf8(json, 0, json.length, fallbackId);
        JsonNode node;
        try {
            node = this.json.readTree(text);
        } catch (JsonProcessingException e) {
            throw error(fallbackId, "malformed JSON: " + readable(e.getOriginalMessage())
                    + (e.getLocation() == null ? "" : " at column " + e.getLocation().getColumnNr()));
        }
        if (node == null || !node.isObject()) throw error(fallbackId, "expected a JSON object, got " + kind(node));
        var record = (com.fasterxml.jackson.databind.node.ObjectNode) node;
        if (!videos.isEmpty() && !acceptVideo)
            throw error(sampleId(record, fallbackId), UnservedMedia.VIDEO.notSupported() + ": the record's source carries video "
                    + videos.getFirst() + (videos.size() > 1 ? " and " + (videos.size() - 1) + " more" : "")
                    + (videoRefusal == null ? "" : "; " + videoRefusal));
        if (!audios.isEmpty() && !acceptAudio)
            throw error(sampleId(record, fallbackId), UnservedMedia.AUDIO.notSupported() + ": the record's source carries audio "
                    + audios.getFirst() + (audios.size() > 1 ? " and " + (audios.size() - 1) + " more" : ""));
        boolean placeImages = false, placeVideos = false, placeAudios = false;
        if (!embedded.isEmpty()) {
            boolean listed = present(record.get("image")) || present(record.get("images"));
            if (!listed && !typedContent(record, "image", "image", "image_url")) {
                var list = record.arrayNode();
                embedded.forEach(list::add);
                record.remove("image");
                record.remove("images");
                record.set(record.has("conversations") ? "image" : "images", list);
            } else {
                fillBareImageItems(record, embedded);
                placeImages = true;
            }
        }
        if (!videos.isEmpty()) {
            boolean listed = present(record.get("video")) || present(record.get("videos"));
            if (!listed && !typedContent(record, "video", "video")) {
                var list = record.arrayNode();
                videos.forEach(list::add);
                record.remove("video");
                record.remove("videos");
                boolean llava = record.has("conversations") && !present(record.get("images"));
                record.set(llava ? "video" : "videos", list);
            } else {
                fillBareVideoItems(record, videos);
                placeVideos = true;
            }
        }
        if (!audios.isEmpty()) {
            boolean listed = present(record.get("audio")) || present(record.get("audios"));
            if (!listed && !typedContent(record, "audio", "audio", "audio_url")) {
                var list = record.arrayNode();
                audios.forEach(list::add);
                record.remove("audio");
                record.set("audios", list);
            } else {
                fillBareItems(record, "audio", List.of("audio", "audio_url", "url", "path"), audios);
                placeAudios = true;
            }
        }
        var sample = parse(record, fallbackId);
        if (placeImages) {
            if (sample.imagePaths().size() != embedded.size())
                throw error(sample.id(), "the record names " + sample.imagePaths().size() + " image(s) but its source carries "
                        + embedded.size() + " for it " + embedded);
            sample = sample.withImages(embedded);
        }
        if (placeVideos) {
            int named = sample.videos().size();
            if (named != videos.size())
                throw error(sample.id(), "the record names " + named + " video(s) but its source carries " + videos.size() + " for it " + videos);
            sample = sample.withVideos(videos);
        }
        if (placeAudios) {
            int named = sample.audios().size();
            if (named != audios.size())
                throw error(sample.id(), "the record names " + named + " audio clip(s) but its source carries " + audios.size() + " for it " + audios);
            sample = sample.withAudios(audios);
        }
        return sample;
    }

    /** Names typed video items that name no video ({@code {"type": "video"}}) after the embedded video of their place. */
    private static void fillBareVideoItems(com.fasterxml.jackson.databind.node.ObjectNode record, List<String> videos) {
        fillBareItems(record, "video", List.of("video", "url", "path"), videos);
    }

    /**
     * Names the typed items of {@code type} that name nothing (none of {@code nameKeys}) after {@code names}, in order of
     * place: the k-th such item (named or not) takes the k-th name.
     */
    private static void fillBareItems(com.fasterxml.jackson.databind.node.ObjectNode record, String type, List<String> nameKeys,
                                      List<String> names) {
        var list = record.get("messages");
        if (list == null || !list.isArray()) return;
        int k = 0;
        for (var m : list) {
            var content = m.get("content");
            if (content == null || !content.isArray()) continue;
            for (var item : content) {
                if (!(item instanceof com.fasterxml.jackson.databind.node.ObjectNode o) || !type.equals(o.path("type").asText(null))) continue;
                boolean named = false;
                for (String key : nameKeys) named |= o.hasNonNull(key);
                if (!named && k < names.size()) o.put(type, names.get(k));
                k++;
            }
        }
    }

    /**
     * Names typed image items that name no image ({@code {"type": "image"}}, as Hugging Face data sets with an image
     * column write them) after the embedded image of their place; a count that differs is reported by the caller.
     */
    private static void fillBareImageItems(com.fasterxml.jackson.databind.node.ObjectNode record, List<String> embedded) {
        fillBareItems(record, "image", List.of("image", "image_url", "url", "path"), embedded);
    }

    /**
     * True when a message's content list holds an item of {@code type} ({@code {"type": type}}) or an item with one of
     * {@code keys} (an untyped {@code {"image": …}}): the record places its media of that kind itself.
     */
    private static boolean typedContent(JsonNode record, String type, String... keys) {
        var list = record.get("messages");
        if (list == null || !list.isArray()) return false;
        for (var m : list) {
            var content = m.get("content");
            if (content == null || !content.isArray()) continue;
            for (var item : content) {
                if (!item.isObject()) continue;
                if (type.equals(item.path("type").asText(null))) return true;
                for (String key : keys) if (item.has(key)) return true;
            }
        }
        return false;
    }

    /** Parses a record already read as JSON. */
    public ChatSample parse(JsonNode record, String fallbackId) {
        if (record == null || !record.isObject())
            throw error(fallbackId, "expected a JSON object, got " + kind(record));
        var id = sampleId(record, fallbackId);
        boolean conversations = record.has("conversations");
        boolean messages = record.has("messages");
        if (conversations && messages) throw error(id, "has both 'conversations' (LLaVA) and 'messages' (HF); expected one");
        if (!conversations && !messages) throw error(id, "missing field 'conversations' (LLaVA format) or 'messages' (HF format)");
        var images = imageList(record, id);
        var videos = acceptVideo ? videoList(record, id) : VideoList.NONE;
        var audios = acceptAudio ? audioList(record, id) : AudioList.NONE;
        if (conversations && videos.given() && images.given() && videos.key().equals("videos") != images.key().equals("images"))
            throw error(id, "has '" + images.key() + "' and '" + videos.key() + "'; expected 'image' and 'video' (LLaVA) "
                    + "or 'images' and 'videos' (ShareGPT)");
        var cursor = new MediaCursor(images, videos, audios);
        ChatSample sample;
        if (conversations) sample = images.key().equals("images") || videos.key().equals("videos")
                || (audios.given() && !images.given() && !videos.given())
                ? parseShareGpt(record, id, cursor) : parseLlava(record, id, cursor);
        else sample = parseMessages(record, id, cursor);
        refuseUnread(record, id);
        return audioInVideo(record, sample, id);
    }

    private static String sampleId(JsonNode record, String fallbackId) {
        var id = record.get("id");
        if (id == null || id.isNull()) return fallbackId;
        if (id.isTextual() || id.isIntegralNumber()) return id.asText();
        throw error(fallbackId, "field 'id': expected a string or integer, got " + kind(id));
    }

    /** The record's top-level image list, the key it came from and whether the record has one at all. */
    private record ImageList(String key, List<String> refs, boolean given) {
        String describe() {
            return refs.size() + " image(s)" + (given ? " in '" + key + "'" : " (no 'image' or 'images' field)");
        }
    }

    /** The record's top-level video list (entries: a reference, or a list of frame references). */
    private record VideoList(String key, List<Message.Video> videos, boolean given) {
        static final VideoList NONE = new VideoList("video", List.of(), false);

        String describe() {
            return videos.size() + " video(s)" + (given ? " in '" + key + "'" : " (no 'video' or 'videos' field)");
        }
    }

    /** The record's top-level audio list ({@code audios} or {@code audio}). */
    private record AudioList(String key, List<String> refs, boolean given) {
        static final AudioList NONE = new AudioList("audios", List.of(), false);

        String describe() {
            return refs.size() + " audio clip(s)" + (given ? " in '" + key + "'" : " (no 'audio' or 'audios' field)");
        }
    }

    /** Hands out the listed images, videos and audio clips to placeholders in order, counting the placeholders of each. */
    private static final class MediaCursor {
        private final ImageList images;
        private final VideoList videos;
        private final AudioList audios;
        private int imagePlaceholders;
        private int videoPlaceholders;
        private int audioPlaceholders;

        MediaCursor(ImageList images, VideoList videos, AudioList audios) {
            this.images = images;
            this.videos = videos;
            this.audios = audios;
        }

        /** The next placeholder's audio clip, or null once the list is used up (the count is reported at the end). */
        Message.Audio nextAudio() {
            int k = audioPlaceholders++;
            return k < audios.refs().size() ? Message.Audio.of(audios.refs().get(k)) : null;
        }

        /** The next placeholder's image, or null once the list is used up (the count is reported at the end). */
        Message.Image nextImage() {
            int k = imagePlaceholders++;
            return k < images.refs().size() ? new Message.Image(images.refs().get(k)) : null;
        }

        /** The next placeholder's video, or null once the list is used up (the count is reported at the end). */
        Message.Video nextVideo() {
            int k = videoPlaceholders++;
            return k < videos.videos().size() ? videos.videos().get(k) : null;
        }

        void checkCount(String id, String where) {
            if (imagePlaceholders != images.refs().size())
                throw error(id, where + " have " + imagePlaceholders + " <image> placeholder(s) but the record lists " + images.describe());
            if (videoPlaceholders != videos.videos().size())
                throw error(id, where + " have " + videoPlaceholders + " <video> placeholder(s) but the record lists " + videos.describe());
            if (audioPlaceholders != audios.refs().size())
                throw error(id, where + " have " + audioPlaceholders + " <audio> placeholder(s) but the record lists " + audios.describe());
        }
    }

    /** LLaVA / qwen-vl-finetune ({@code conversations} + {@code image} or no images): spec §10. */
    private ChatSample parseLlava(JsonNode record, String id, MediaCursor cursor) {
        var turns = turns(record, id);
        var messages = new ArrayList<Message>(turns.size());
        for (int i = 0; i < turns.size(); i++) {
            var path = "conversations[" + i + "]";
            var turn = turns.get(i);
            if (!turn.isObject()) throw error(id, path + ": expected an object, got " + kind(turn));
            var from = requireText(turn, "from", path, id);
            var value = requireText(turn, "value", path, id);
            switch (from) {
                case "human", "user" -> messages.add(new Message(Role.USER, split(value, true, cursor, path + ".value", id)));
                case "system" -> messages.add(Message.text(Role.SYSTEM, value));
                default -> messages.add(Message.text(Role.ASSISTANT, value));
            }
        }
        cursor.checkCount(id, "the human turns");
        return new ChatSample(id, messages, cursor.images.refs());
    }

    /** ShareGPT as LLaMA-Factory reads it ({@code conversations} + {@code images}): placeholders in any turn, text verbatim. */
    private ChatSample parseShareGpt(JsonNode record, String id, MediaCursor cursor) {
        var turns = turns(record, id);
        var messages = new ArrayList<Message>(turns.size());
        for (int i = 0; i < turns.size(); i++) {
            var path = "conversations[" + i + "]";
            var turn = turns.get(i);
            if (!turn.isObject()) throw error(id, path + ": expected an object, got " + kind(turn));
            var from = requireText(turn, "from", path, id);
            var role = switch (from) {
                case "human", "user" -> Role.USER;
                case "gpt", "assistant" -> Role.ASSISTANT;
                case "system" -> Role.SYSTEM;
                default -> throw unsupportedRole(id, path + ".from", from, "human, gpt or system (or user, assistant)");
            };
            var value = requireText(turn, "value", path, id);
            messages.add(new Message(role, split(value, false, cursor, path + ".value", id)));
        }
        cursor.checkCount(id, "the turns");
        return new ChatSample(id, messages, cursor.images.refs());
    }

    private static JsonNode turns(JsonNode record, String id) {
        var turns = record.get("conversations");
        if (!turns.isArray()) throw error(id, "field 'conversations': expected an array, got " + kind(turns));
        if (turns.isEmpty()) throw error(id, "field 'conversations' is empty");
        return turns;
    }

    /**
     * One turn's text with each {@code <image>} (and, when video is accepted, {@code <video>}) replaced by the next
     * listed one of its kind. LLaVA ({@code strip}) strips the segments around placeholders; LLaMA-Factory / ms-swift
     * keep them as they are. Empty segments are dropped either way (they render nothing); a text without placeholders
     * stays one verbatim part under the verbatim rule.
     */
    private List<Message.Part> split(String value, boolean strip, MediaCursor cursor, String path, String id) {
        refuseUnservedPlaceholders(value, path, id);
        if (!strip && !value.contains(IMAGE_TOKEN) && !(acceptVideo && value.contains(VIDEO_TOKEN))
                && !(acceptAudio && value.contains(AUDIO_TOKEN)))
            return List.of(new Message.Text(value));
        var parts = new ArrayList<Message.Part>();
        int pos = 0;
        while (true) {
            int img = value.indexOf(IMAGE_TOKEN, pos);
            int vid = acceptVideo ? value.indexOf(VIDEO_TOKEN, pos) : -1;
            int aud = acceptAudio ? value.indexOf(AUDIO_TOKEN, pos) : -1;
            int at = img;
            String token = IMAGE_TOKEN;
            if (vid >= 0 && (at < 0 || vid < at)) { at = vid; token = VIDEO_TOKEN; }
            if (aud >= 0 && (at < 0 || aud < at)) { at = aud; token = AUDIO_TOKEN; }
            int end = at < 0 ? value.length() : at;
            var seg = strip ? value.substring(pos, end).strip() : value.substring(pos, end);
            if (!seg.isEmpty()) parts.add(new Message.Text(seg));
            if (at < 0) break;
            Message.Part media = token == VIDEO_TOKEN ? cursor.nextVideo() : token == AUDIO_TOKEN ? cursor.nextAudio() : cursor.nextImage();
            if (media != null) parts.add(media);
            pos = at + token.length();
        }
        return parts;
    }

    /** {@code cause}, with this parser's reason for refusing video when {@code media} is video and there is one. */
    private String notSupported(UnservedMedia media, String cause) {
        return media == UnservedMedia.VIDEO && videoRefusal != null ? cause + ": " + videoRefusal : cause;
    }

    /** A text read for placeholders must hold none of a medium not served: the trainers would read it as that medium. */
    private void refuseUnservedPlaceholders(String value, String path, String id) {
        for (var media : unserved)
            if (value.contains(media.placeholder()))
                throw error(id, path + ": " + media.placeholder() + " placeholder found; " + notSupported(media, media.notSupported()));
    }

    /** The top-level {@code audio} / {@code audios} list: each entry a path or URI. */
    private static AudioList audioList(JsonNode record, String id) {
        var key = "audios";
        var node = record.get("audios");
        var singular = record.get("audio");
        if (node != null && !node.isNull() && singular != null && !singular.isNull())
            throw error(id, "has both 'audio' and 'audios'; expected one");
        if (node == null || node.isNull()) { node = singular; key = "audio"; }
        if (node == null || node.isNull()) return new AudioList("audios", List.of(), false);
        if (node.isTextual()) return new AudioList(key, List.of(node.asText()), true);
        if (!node.isArray()) throw error(id, "field '" + key + "': expected a string or an array of strings, got " + kind(node));
        var out = new ArrayList<String>(node.size());
        for (int i = 0; i < node.size(); i++) {
            var e = node.get(i);
            if (!e.isTextual()) throw error(id, "field '" + key + "[" + i + "]': expected a string (a path or URI), got " + kind(e));
            if (e.asText().isEmpty()) throw error(id, "field '" + key + "[" + i + "]': empty audio reference");
            out.add(e.asText());
        }
        return new AudioList(key, out, true);
    }

    /** The top-level {@code video} / {@code videos} list: each entry a reference or a list of frame references. */
    private static VideoList videoList(JsonNode record, String id) {
        var key = "video";
        var node = record.get("video");
        var plural = record.get("videos");
        if (node != null && !node.isNull() && plural != null && !plural.isNull())
            throw error(id, "has both 'video' and 'videos'; expected one");
        if (plural != null && !plural.isNull()) { node = plural; key = "videos"; }
        if (node == null || node.isNull()) return new VideoList(key, List.of(), false);
        if (node.isTextual()) return new VideoList(key, List.of(Message.Video.of(node.asText())), true);
        if (!node.isArray())
            throw error(id, "field '" + key + "': expected a string or an array of strings or of frame lists, got " + kind(node));
        var out = new ArrayList<Message.Video>(node.size());
        for (int i = 0; i < node.size(); i++) {
            var e = node.get(i);
            var path = key + "[" + i + "]";
            if (e.isTextual()) out.add(Message.Video.of(e.asText()));
            else if (e.isArray()) out.add(new Message.Video(null, frameList(e, "field '" + path + "'", id), java.util.Map.of()));
            else throw error(id, "field '" + path + "': expected a string or an array of frame paths, got " + kind(e));
        }
        return new VideoList(key, out, true);
    }

    private static List<String> frameList(JsonNode array, String path, String id) {
        if (array.isEmpty()) throw error(id, path + ": empty frame list");
        if (array.size() > MAX_VIDEO_FRAMES)
            throw error(id, path + ": " + array.size() + " frames, over the limit of " + MAX_VIDEO_FRAMES);
        var frames = new ArrayList<String>(array.size());
        for (int j = 0; j < array.size(); j++) {
            var f = array.get(j);
            if (!f.isTextual()) throw error(id, path + "[" + j + "]: expected a string (a frame image), got " + kind(f));
            frames.add(f.asText());
        }
        return frames;
    }

    private static ImageList imageList(JsonNode record, String id) {
        var key = "image";
        var node = record.get("image");
        var plural = record.get("images");
        if (node != null && !node.isNull() && plural != null && !plural.isNull())
            throw error(id, "has both 'image' and 'images'; expected one");
        if (plural != null && !plural.isNull()) { node = plural; key = "images"; }
        if (node == null || node.isNull()) return new ImageList(key, List.of(), false);
        if (node.isTextual()) return new ImageList(key, List.of(node.asText()), true);
        if (!node.isArray()) throw error(id, "field '" + key + "': expected a string or an array of strings, got " + kind(node));
        var out = new ArrayList<String>(node.size());
        for (int i = 0; i < node.size(); i++) {
            var e = node.get(i);
            if (!e.isTextual()) throw error(id, "field '" + key + "[" + i + "]': expected a string, got " + kind(e));
            out.add(e.asText());
        }
        return new ImageList(key, out, true);
    }

    /**
     * HF {@code messages}. With typed content (any {@code content} an array) images are content items and a
     * top-level list or an {@code <image>} in string content is refused; with string content only, placeholders
     * are read as LLaMA-Factory / ms-swift do, against the top-level list.
     */
    private ChatSample parseMessages(JsonNode record, String id, MediaCursor cursor) {
        var images = cursor.images;
        var list = record.get("messages");
        if (!list.isArray()) throw error(id, "field 'messages': expected an array, got " + kind(list));
        if (list.isEmpty()) throw error(id, "field 'messages' is empty");
        String typedPath = null;
        for (int i = 0; i < list.size() && typedPath == null; i++) {
            var content = list.get(i).get("content");
            if (content != null && content.isArray()) typedPath = "messages[" + i + "].content";
        }
        var messages = new ArrayList<Message>(list.size());
        for (int i = 0; i < list.size(); i++) {
            var path = "messages[" + i + "]";
            var m = list.get(i);
            if (!m.isObject()) throw error(id, path + ": expected an object, got " + kind(m));
            var roleName = requireText(m, "role", path, id);
            var role = switch (roleName) {
                case "system" -> Role.SYSTEM;
                case "user" -> Role.USER;
                case "assistant" -> Role.ASSISTANT;
                default -> throw unsupportedRole(id, path + ".role", roleName, "system, user or assistant");
            };
            var content = m.get("content");
            if (content == null) throw error(id, path + ": missing field 'content'");
            if (content.isTextual()) {
                var text = content.asText();
                if (typedPath == null) {
                    messages.add(new Message(role, split(text, false, cursor, path + ".content", id)));
                } else {
                    if (text.contains(IMAGE_TOKEN))
                        throw error(id, path + ".content: <image> placeholder in string content, but " + typedPath
                                + " is typed (an array); a record uses typed image items or placeholders, not both");
                    if (acceptVideo && text.contains(VIDEO_TOKEN))
                        throw error(id, path + ".content: <video> placeholder in string content, but " + typedPath
                                + " is typed (an array); a record uses typed video items or placeholders, not both");
                    if (acceptAudio && text.contains(AUDIO_TOKEN))
                        throw error(id, path + ".content: <audio> placeholder in string content, but " + typedPath
                                + " is typed (an array); a record uses typed audio items or placeholders, not both");
                    refuseUnservedPlaceholders(text, path + ".content", id);
                    messages.add(Message.text(role, text));
                }
            } else if (content.isArray()) {
                var parts = new ArrayList<Message.Part>(content.size());
                for (int j = 0; j < content.size(); j++) parts.add(contentItem(content.get(j), path + ".content[" + j + "]", id));
                messages.add(new Message(role, parts));
            } else {
                throw error(id, path + ".content: expected a string or an array, got " + kind(content));
            }
        }
        var videos = cursor.videos;
        if (typedPath == null) {
            cursor.checkCount(id, "the messages");
            return new ChatSample(id, messages, images.refs());
        }
        var sample = ChatSample.of(id, messages);
        var audios = cursor.audios;
        if (!audios.refs().isEmpty()) {
            int used = sample.audios().size();
            throw error(id, "field '" + audios.key() + "' lists " + audios.refs().size() + " audio clip(s) but the record uses "
                    + (used == 0 ? "none: its content is typed (" + typedPath + " is an array), where audio clips are content items"
                                 : "its " + used + " typed audio item(s) instead; a top-level list is read only with string content"));
        }
        if (!videos.videos().isEmpty()) {
            int used = sample.videos().size();
            throw error(id, "field '" + videos.key() + "' lists " + videos.videos().size() + " video(s) but the record uses "
                    + (used == 0 ? "none: its content is typed (" + typedPath + " is an array), where videos are content items"
                                 : "its " + used + " typed video item(s) instead; a top-level list is read only with string content"));
        }
        int listed = images.refs().size();
        if (listed > 0) {
            int used = sample.imagePaths().size();
            throw error(id, "field '" + images.key() + "' lists " + listed + " image(s) but the record uses "
                    + (used == 0 ? "none: its content is typed (" + typedPath + " is an array), where images are content items"
                                 : "its " + used + " typed image item(s) instead; a top-level list is read only with string content"));
        }
        return sample;
    }

    private static SampleException unsupportedRole(String id, String path, String role, String expected) {
        boolean tool = switch (role) {
            case "tool", "observation", "function_call", "function", "tool_call", "tool_response" -> true;
            default -> false;
        };
        return error(id, path + ": unsupported role '" + role + "'" + (tool ? ": tool turns are not supported" : "")
                + "; expected " + expected);
    }

    /** Fields the other trainers read but Stoker does not: refused rather than silently dropped. */
    private void refuseUnread(JsonNode record, String id) {
        for (var media : unserved)
            for (var key : media.fields())
                if (present(record.get(key))) throw error(id, "field '" + key + "': " + notSupported(media, media.notSupported()));
        if (present(record.get("tools"))) throw error(id, "field 'tools': tool definitions are not supported");
        var inVideo = record.get(Message.USE_AUDIO_IN_VIDEO);
        if (inVideo != null && !inVideo.isNull() && !inVideo.isBoolean())
            throw error(id, "field '" + Message.USE_AUDIO_IN_VIDEO + "': expected a boolean, got " + kind(inVideo));
        if (!acceptAudio && inVideo != null && inVideo.asBoolean(false))
            throw error(id, "field '" + Message.USE_AUDIO_IN_VIDEO + "': " + UnservedMedia.AUDIO.notSupported());
    }

    private static boolean present(JsonNode n) {
        if (n == null || n.isNull()) return false;
        if (n.isTextual()) return !n.asText().isEmpty() && !n.asText().equals("[]");
        return !(n.isContainerNode() && n.isEmpty());
    }

    private Message.Part contentItem(JsonNode item, String path, String id) {
        if (!item.isObject()) throw error(id, path + ": expected an object, got " + kind(item));
        var typeNode = item.get("type");
        if (typeNode != null && !typeNode.isTextual()) throw error(id, path + ".type: expected a string, got " + kind(typeNode));
        var type = typeNode == null ? null : typeNode.asText();
        for (var media : unserved)
            for (var name : media.itemTypes())
                if (name.equals(type) || item.has(name)) throw error(id, path + ": " + notSupported(media, media.contentNotSupported()));
        if (acceptVideo && ("video".equals(type) || item.has("video"))) return videoItem(item, type, path, id, acceptAudio);
        if (acceptAudio && ("input_audio".equals(type) || item.has("input_audio")))
            throw error(id, path + ": inline audio data (input_audio) is not supported; give the clip as {\"type\": \"audio\", \"audio\": PATH | URI}");
        if (acceptAudio && ("audio".equals(type) || "audio_url".equals(type) || item.has("audio") || item.has("audio_url")))
            return audioItem(item, type, path, id);
        if ("image".equals(type) || "image_url".equals(type) || item.has("image") || item.has("image_url"))
            return new Message.Image(imageRef(item, path, id));
        if ("text".equals(type) || (type == null && item.has("text")))
            return new Message.Text(requireText(item, "text", path, id));
        throw error(id, path + ": unsupported content item" + (type == null ? " without 'type'" : " of type '" + type + "'")
                + "; expected text or image");
    }

    /** A typed audio item: its source ({@code audio}, {@code audio_url}, {@code url} or {@code path}) and every other key as an option. */
    private static Message.Audio audioItem(JsonNode item, String type, String path, String id) {
        if (item.has("image") || item.has("image_url") || item.has("video") || (type != null && !type.equals("audio") && !type.equals("audio_url")))
            throw error(id, path + ": an item is one medium, not several" + (type == null ? "" : " (type '" + type + "')"));
        String ref = null;
        String sourceKey = null;
        for (var key : new String[] {"audio", "audio_url", "url", "path"}) {
            var v = item.get(key);
            if (v == null || v.isNull()) continue;
            sourceKey = key;
            if (v.isTextual()) ref = v.asText();
            else if (key.equals("audio_url") && v.isObject()) ref = requireText(v, "url", path + ".audio_url", id);
            else throw error(id, path + "." + key + ": expected a string" + (key.equals("audio_url") ? " or {\"url\": ...}" : "")
                    + ", got " + kind(v));
            break;
        }
        if (sourceKey == null) throw error(id, path + ": audio item has no 'audio', 'audio_url', 'url' or 'path'");
        if (ref.isEmpty()) throw error(id, path + "." + sourceKey + ": empty audio reference");
        var options = new java.util.LinkedHashMap<String, Object>();
        var names = item.fieldNames();
        while (names.hasNext()) {
            var key = names.next();
            if (key.equals("type") || key.equals(sourceKey)) continue;
            if (options.size() == MAX_AUDIO_OPTIONS) throw error(id, path + ": more than " + MAX_AUDIO_OPTIONS + " per-item keys");
            options.put(key, optionValue(item.get(key), key, path, id, "audio"));
        }
        return new Message.Audio(ref, options);
    }

    /** A per-item option's value: a JSON number (integral as Long) or a string, bounded; {@code medium} names the item kind. */
    private static Object optionValue(JsonNode v, String key, String path, String id, String medium) {
        var keyPath = path + "." + key;
        if (key.length() > MAX_VIDEO_OPTION_CHARS)
            throw error(id, path + ": a per-item key of " + key.length() + " characters, over the limit of " + MAX_VIDEO_OPTION_CHARS);
        if (v.isIntegralNumber()) {
            if (!v.canConvertToLong()) throw error(id, keyPath + ": " + v.asText() + " is out of range");
            return v.longValue();
        }
        if (v.isNumber()) {
            double d = v.doubleValue();
            if (!Double.isFinite(d)) throw error(id, keyPath + ": " + v.asText() + " is not a finite number");
            return d;
        }
        if (v.isTextual()) {
            if (v.asText().length() > MAX_VIDEO_OPTION_CHARS)
                throw error(id, keyPath + ": a string of " + v.asText().length() + " characters, over the limit of " + MAX_VIDEO_OPTION_CHARS);
            return v.asText();
        }
        throw error(id, keyPath + ": expected a number or a string (a per-item " + medium + " option), got " + kind(v));
    }

    /**
     * The record's top-level {@code use_audio_in_video} given to each of its videos that does not say it itself, then
     * the rules every video of a record must keep (see the class comment): one value for all, and a file for audio.
     */
    private ChatSample audioInVideo(JsonNode record, ChatSample sample, String id) {
        if (!acceptAudio) return sample;
        var top = record.get(Message.USE_AUDIO_IN_VIDEO);
        var videos = sample.videos();
        if (videos.isEmpty()) return sample;
        if (top != null && top.isBoolean()) {
            var out = new ArrayList<Message>(sample.messages().size());
            for (var m : sample.messages()) {
                var parts = new ArrayList<Message.Part>(m.parts().size());
                for (var p : m.parts()) {
                    if (p instanceof Message.Video v && !v.options().containsKey(Message.USE_AUDIO_IN_VIDEO)) {
                        var options = new java.util.LinkedHashMap<>(v.options());
                        options.put(Message.USE_AUDIO_IN_VIDEO, top.booleanValue());
                        p = new Message.Video(v.ref(), v.frames(), options);
                    }
                    parts.add(p);
                }
                out.add(new Message(m.role(), parts));
            }
            sample = new ChatSample(sample.id(), out, sample.imagePaths());
            videos = sample.videos();
        }
        boolean first = videos.getFirst().useAudioInVideo();
        for (int k = 0; k < videos.size(); k++) {
            var v = videos.get(k);
            if (v.useAudioInVideo() != first)
                throw error(id, "video " + (k + 1) + " has use_audio_in_video " + v.useAudioInVideo() + " but video 1 has " + first
                        + "; the processor and the model's positions take one value per sample");
            if (v.useAudioInVideo() && v.isFrameList())
                throw error(id, "video " + (k + 1) + " is a list of " + v.frames().size()
                        + " frame images, which has no audio track, but use_audio_in_video is true");
        }
        return sample;
    }

    /** A typed video item: its source ({@code video}, {@code url} or {@code path}) and every other key as an option. */
    private static Message.Video videoItem(JsonNode item, String type, String path, String id, boolean acceptAudio) {
        if (item.has("image") || item.has("image_url") || (type != null && !type.equals("video")))
            throw error(id, path + ": an item is an image or a video, not both" + (type == null ? "" : " (type '" + type + "')"));
        if (acceptAudio && (item.has("audio") || item.has("audio_url")))
            throw error(id, path + ": an item is a video or an audio clip, not both; give the clip as its own {\"type\": \"audio\"} item"
                    + " (or use_audio_in_video for the video's own track)");
        String ref = null;
        List<String> frames = List.of();
        String sourceKey = null;
        for (var key : new String[] {"video", "url", "path"}) {
            var v = item.get(key);
            if (v == null || v.isNull()) continue;
            sourceKey = key;
            if (v.isTextual()) ref = v.asText();
            else if (key.equals("video") && v.isArray()) frames = frameList(v, path + ".video", id);
            else throw error(id, path + "." + key + ": expected a string" + (key.equals("video") ? " or an array of frame paths" : "")
                    + ", got " + kind(v));
            break;
        }
        if (sourceKey == null) throw error(id, path + ": video item has no 'video', 'url' or 'path'");
        var options = new java.util.LinkedHashMap<String, Object>();
        var names = item.fieldNames();
        while (names.hasNext()) {
            var key = names.next();
            if (key.equals("type") || key.equals(sourceKey)) continue;
            var keyPath = path + "." + key;
            if (key.equals(Message.USE_AUDIO_IN_VIDEO)) {
                var v = item.get(key);
                if (!v.isBoolean()) throw error(id, keyPath + ": expected a boolean, got " + kind(v));
                if (v.booleanValue() && !acceptAudio) throw error(id, keyPath + ": " + UnservedMedia.AUDIO.notSupported());
                if (acceptAudio) options.put(key, v.booleanValue());
                continue;
            }
            if (options.size() == MAX_VIDEO_OPTIONS)
                throw error(id, path + ": more than " + MAX_VIDEO_OPTIONS + " per-item keys");
            if (key.length() > MAX_VIDEO_OPTION_CHARS)
                throw error(id, path + ": a per-item key of " + key.length() + " characters, over the limit of " + MAX_VIDEO_OPTION_CHARS);
            var v = item.get(key);
            if (v.isIntegralNumber()) {
                if (!v.canConvertToLong()) throw error(id, keyPath + ": " + v.asText() + " is out of range");
                options.put(key, v.longValue());
            } else if (v.isNumber()) {
                double d = v.doubleValue();
                if (!Double.isFinite(d)) throw error(id, keyPath + ": " + v.asText() + " is not a finite number");
                options.put(key, d);
            } else if (v.isTextual()) {
                if (v.asText().length() > MAX_VIDEO_OPTION_CHARS)
                    throw error(id, keyPath + ": a string of " + v.asText().length() + " characters, over the limit of " + MAX_VIDEO_OPTION_CHARS);
                options.put(key, v.asText());
            } else {
                throw error(id, keyPath + ": expected a number or a string (a per-item video option), got " + kind(v));
            }
        }
        return new Message.Video(ref, frames, options);
    }

    private static String imageRef(JsonNode item, String path, String id) {
        for (var key : new String[] {"image", "image_url", "url", "path"}) {
            var v = item.get(key);
            if (v == null || v.isNull()) continue;
            if (v.isTextual()) return v.asText();
            if (key.equals("image_url") && v.isObject()) return requireText(v, "url", path + ".image_url", id);
            throw error(id, path + "." + key + ": expected a string" + (key.equals("image_url") ? " or {\"url\": ...}" : "")
                    + ", got " + kind(v));
        }
        throw error(id, path + ": image item has no 'image', 'image_url', 'url' or 'path'");
    }

    private static String requireText(JsonNode obj, String field, String path, String id) {
        var v = obj.get(field);
        if (v == null) throw error(id, path + ": missing field '" + field + "'");
        if (!v.isTextual()) throw error(id, path + "." + field + ": expected a string, got " + kind(v));
        return v.asText();
    }

    private static String decodeUtf8(byte[] buf, int offset, int length, String fallbackId) {
        CharsetDecoder dec = StandardCharsets.UTF_8.newDecoder()
                .onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT);
        var in = ByteBuffer.wrap(buf, offset, length);
        var out = CharBuffer.allocate(length);
        CoderResult r = dec.decode(in, out, true);
        if (!r.isError()) r = dec.flush(out);
        if (r.isError())
            throw error(fallbackId, "invalid UTF-8 at byte " + (in.position() - offset) + " of the line ("
                    + r.length() + " malformed byte(s))");
        out.flip();
        if (out.length() > 0 && out.charAt(0) == '\uFEFF') out.position(1);
        return out.toString();
    }

    /**
     * Jackson's message without the source description it embeds in nested locations
     * ({@code [Source: REDACTED (…); line: 1, column: 32]} becomes {@code column 32}), so that an
     * errors file says what is wrong with the line and where, in one short line.
     */
    static String readable(String jacksonMessage) {
        return jacksonMessage.replaceAll("\\[Source: [^;\\]]*; line: \\d+, column: (\\d+)\\]", "column $1")
                .replace('\n', ' ').strip();
    }

    private static String kind(JsonNode n) {
        if (n == null || n.isMissingNode()) return "nothing";
        return n.getNodeType().name().toLowerCase();
    }

    private static SampleException error(String id, String message) {
        return new SampleException(id, SampleException.Stage.MANIFEST, message);
    }
}
