package dev.stoker.parquet;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.stoker.core.SampleException;
import dev.stoker.core.UnservedMedia;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.parquet.example.data.Group;
import org.apache.parquet.schema.GroupType;
import org.apache.parquet.schema.LogicalTypeAnnotation;
import org.apache.parquet.schema.MessageType;
import org.apache.parquet.schema.PrimitiveType;
import org.apache.parquet.schema.Type;

/**
 * The Hugging Face datasets layout of a Parquet file, and the conversion of its rows to the JSON records
 * {@code SampleParser} reads.
 *
 * <p>Columns read (others are not read at all: the reader is given a projection of these):
 * <ul>
 *   <li>{@code messages} (list of struct&lt;role, content&gt;, content a string or a list of struct&lt;type, text, …&gt;)
 *       or {@code conversations} (list of struct&lt;from, value&gt;): copied into the record as they are, null
 *       fields left out (a struct column has every field in every item; a null {@code image} in a text item
 *       would make it an image item);
 *   <li>{@code images} (list of struct&lt;bytes, path&gt;, or of strings) or {@code image} (one struct, or a
 *       string): the images, in order;
 *   <li>{@code videos} (list of struct&lt;bytes, path&gt;, as the datasets {@code Video} feature writes it, or of
 *       strings) or {@code video} (one struct, or a string): the videos, in order (issue 29), read as the image columns
 *       are: a row whose videos are all paths names them in its record ({@code videos}, or {@code video} beside a
 *       {@code conversations} column; typed {@code {"type": "video"}} items naming none are named after them), and the
 *       pipeline opens them by reference; a row that carries the bytes of any gives them all as its
 *       {@link Row#videos()} (a path beside them is opened by reference). Whether video is served is the parser's
 *       call: a job without video refuses such a row, naming the video ({@code SampleParser});
 *   <li>{@code audios} (list of struct&lt;bytes, path&gt;, as the datasets {@code Audio} feature writes it, or of
 *       strings) or {@code audio} (one struct, or a string): the audio clips, in order (issue 32), read as the video
 *       columns are: a row whose clips are all paths names them in its record ({@code audios}; typed
 *       {@code {"type": "audio"}} items naming none are named after them); a row that carries the bytes of any gives
 *       them all as its {@link Row#audios()} (a path beside them is fetched with the record). A column that holds
 *       nothing in a row (HF's null audio {@code {bytes: null, path: null}}, an empty list) gives that row no clip.
 *       Whether audio is served is the parser's call: under a processor without audio (the Qwen-VL ones) such a row is
 *       refused, naming the clip ({@code SampleParser});
 *   <li>{@code id} (string or integer), optional;
 *   <li>the columns of a medium Stoker does not serve ({@link UnservedMedia}, none since audio is read), of any type: a
 *       row where one is non-empty is refused naming the column, rather than served as text without it.
 * </ul>
 *
 * <p>Threading: stateless apart from the schema; safe to share.
 */
final class HfRows {
    static final Set<String> MESSAGE_COLUMNS = Set.of("messages", "conversations");
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final JsonNodeFactory NODES = JsonNodeFactory.instance;

    /** One image of a row: encoded bytes, or a path to fetch (bytes null), named uniquely within the row. */
    record Image(String name, byte[] bytes, String path) {}

    /** One video of a row: a container's bytes, or a path to open (bytes null), named uniquely among the row's videos. */
    record Video(String name, byte[] bytes, String path) {}

    /**
     * A row converted: its JSON, its images when the row carries any (empty: the JSON names them by reference), and its
     * videos likewise.
     */
    record Row(byte[] json, List<Image> images, List<Video> videos, List<Image> audios) {
        Row(byte[] json, List<Image> images) { this(json, images, List.of(), List.of()); }

        /** Bytes the row holds in the cache of decoded row groups: its JSON and the images', videos' and clips' bytes. */
        long bytes() {
            long n = json.length;
            for (var i : images) n += i.bytes() == null ? 0 : i.bytes().length;
            for (var v : videos) n += v.bytes() == null ? 0 : v.bytes().length;
            for (var a : audios) n += a.bytes() == null ? 0 : a.bytes().length;
            return n;
        }
    }

    private final MessageType projection;
    private final String messagesColumn;
    private final String imagesColumn;
    private final String videosColumn;
    private final String audiosColumn;

    /** Whether the file has a {@code videos} or {@code video} column: its rows may hold videos ({@code --video auto}). */
    boolean hasVideoColumn() { return videosColumn != null; }
    private final boolean hasId;
    private final Map<String, UnservedMedia> mediaColumns;

    private HfRows(MessageType projection, String messagesColumn, String imagesColumn, String videosColumn, String audiosColumn,
                   boolean hasId, Map<String, UnservedMedia> mediaColumns) {
        this.projection = projection;
        this.messagesColumn = messagesColumn;
        this.imagesColumn = imagesColumn;
        this.videosColumn = videosColumn;
        this.audiosColumn = audiosColumn;
        this.hasId = hasId;
        this.mediaColumns = mediaColumns;
    }

    /** The layout of a file with schema {@code schema}; refused when it has neither a messages nor a conversations column. */
    static HfRows of(MessageType schema, String file) throws IOException {
        String messages = null;
        for (String c : List.of("messages", "conversations")) {
            if (!schema.containsField(c)) continue;
            if (messages != null) throw new IOException(file + " has both a 'messages' and a 'conversations' column; expected one");
            messages = c;
        }
        if (messages == null)
            throw new IOException(file + " has no 'messages' or 'conversations' column (columns: " + names(schema) + ")");
        String images = null;
        for (String c : List.of("images", "image")) {
            if (!schema.containsField(c)) continue;
            if (images != null) throw new IOException(file + " has both an 'images' and an 'image' column; expected one");
            images = c;
        }
        String videos = null;
        for (String c : List.of("videos", "video")) {
            if (!schema.containsField(c)) continue;
            if (videos != null) throw new IOException(file + " has both a 'videos' and a 'video' column; expected one");
            videos = c;
        }
        String audios = null;
        for (String c : UnservedMedia.AUDIO.fields()) {
            if (!schema.containsField(c)) continue;
            if (audios != null) throw new IOException(file + " has both an 'audios' and an 'audio' column; expected one");
            audios = c;
        }
        var fields = new ArrayList<Type>();
        boolean id = schema.containsField("id") && schema.getType("id").isPrimitive();
        if (id) fields.add(schema.getType("id"));
        fields.add(schema.getType(messages));
        if (images != null) fields.add(schema.getType(images));
        if (videos != null) fields.add(schema.getType(videos));
        if (audios != null) fields.add(schema.getType(audios));
        var media = new LinkedHashMap<String, UnservedMedia>();
        for (var m : UnservedMedia.values())
            if (m != UnservedMedia.VIDEO && m != UnservedMedia.AUDIO) // read above; served or refused by the parser
                for (String c : m.fields())
                if (schema.containsField(c)) {
                    media.put(c, m);
                    fields.add(schema.getType(c));
                }
        return new HfRows(new MessageType(schema.getName(), fields), messages, images, videos, audios, id, media);
    }

    private static String names(GroupType t) {
        var out = new ArrayList<String>();
        for (var f : t.getFields()) out.add(f.getName());
        return String.join(", ", out);
    }

    /** The columns read: the projection given to the reader. */
    MessageType projection() { return projection; }

    /**
     * Row {@code row} of a file (read with {@link #projection()}) as a record named {@code sampleId}; {@code rowName}
     * prefixes the names of its images without a usable path ({@code row17#0}). A null or malformed messages column,
     * an image with neither bytes nor a path, or a non-empty column of a medium not served is a SampleException
     * (MANIFEST) naming {@code sampleId}.
     */
    Row convert(Group row, String sampleId, String rowName) {
        for (var e : mediaColumns.entrySet()) {
            int c = row.getType().getFieldIndex(e.getKey());
            if (row.getFieldRepetitionCount(c) > 0 && holds(row, c, 0))
                throw fail(sampleId, "column '" + e.getKey() + "': " + e.getValue().notSupported());
        }
        var record = NODES.objectNode();
        if (hasId && row.getFieldRepetitionCount("id") > 0) {
            var id = value(row, row.getType().getFieldIndex("id"), 0);
            if (id != null && !id.isNull()) record.set("id", id.isTextual() || id.isNumber() ? id : NODES.textNode(id.asText()));
        }
        int m = row.getType().getFieldIndex(messagesColumn);
        if (row.getFieldRepetitionCount(m) == 0) throw fail(sampleId, "the '" + messagesColumn + "' column is null");
        JsonNode messages;
        try {
            messages = value(row, m, 0);
        } catch (RuntimeException e) {
            throw new SampleException(sampleId, SampleException.Stage.MANIFEST, "the '" + messagesColumn + "' column cannot be read: " + e, e);
        }
        if (messages == null || !messages.isArray())
            throw fail(sampleId, "the '" + messagesColumn + "' column is " + (messages == null ? "null" : "not a list of structs") + "; expected a list of "
                    + (messagesColumn.equals("messages") ? "struct<role, content>" : "struct<from, value>"));
        for (int k = 0; k < messages.size(); k++)
            if (!messages.get(k).isObject()) throw fail(sampleId, messagesColumn + "[" + k + "] is " + (messages.get(k).isNull() ? "null" : "not a struct"));
        record.set(messagesColumn, messages);

        var images = images(row, sampleId, rowName);
        boolean carried = false;
        for (var i : images) carried |= i.bytes() != null;
        if (!carried && !images.isEmpty()) { // every image is a path: the record names them, the pipeline fetches them
            var paths = new ArrayList<String>();
            for (var i : images) paths.add(i.path());
            if (!fillBareItems(record, "image", List.of("image", "image_url"), List.of("image", "image_url", "url", "path"), paths)) {
                var list = record.putArray(messagesColumn.equals("conversations") ? "image" : "images");
                paths.forEach(list::add);
            }
            images = List.of();
        }
        var videos = videos(row, sampleId, rowName);
        boolean carriedVideo = false;
        for (var v : videos) carriedVideo |= v.bytes() != null;
        if (!carriedVideo && !videos.isEmpty()) { // every video a path: the record names them, the pipeline opens them
            var paths = new ArrayList<String>();
            for (var v : videos) paths.add(v.path());
            if (!fillBareItems(record, "video", List.of("video"), List.of("video", "url", "path"), paths)) {
                var list = record.putArray(messagesColumn.equals("conversations") && !record.has("images") ? "video" : "videos");
                paths.forEach(list::add);
            }
            videos = List.of();
        }
        var audios = audios(row, sampleId, rowName);
        boolean carriedAudio = false;
        for (var a : audios) carriedAudio |= a.bytes() != null;
        if (!carriedAudio && !audios.isEmpty()) { // every clip a path: the record names them, the encoder fetches them
            var paths = new ArrayList<String>();
            for (var a : audios) paths.add(a.path());
            if (!fillBareItems(record, "audio", List.of("audio"), List.of("audio", "audio_url", "url", "path"), paths)) {
                var list = record.putArray("audios");
                paths.forEach(list::add);
            }
            audios = List.of();
        }
        try {
            return new Row(JSON.writeValueAsBytes(record), images, videos, audios);
        } catch (IOException e) {
            throw new SampleException(sampleId, SampleException.Stage.MANIFEST, "cannot write the record as JSON: " + e, e);
        }
    }

    private List<Image> images(Group row, String sampleId, String rowName) {
        if (imagesColumn == null) return List.of();
        int c = row.getType().getFieldIndex(imagesColumn);
        if (row.getFieldRepetitionCount(c) == 0) return List.of();
        Type t = row.getType().getType(c);
        var raw = new ArrayList<Image>(); // names filled below
        if (isList(t)) {
            var list = row.getGroup(c, 0);
            var elements = elements(list);
            for (int k = 0; k < elements.size(); k++) raw.add(image(elements.get(k), sampleId, imagesColumn + "[" + k + "]"));
        } else {
            raw.add(image(new Slot(row, c, 0), sampleId, imagesColumn));
        }
        var paths = new HashSet<String>();
        var duplicate = new HashSet<String>();
        for (var i : raw) if (i.path() != null && !paths.add(i.path())) duplicate.add(i.path());
        var out = new ArrayList<Image>(raw.size());
        var used = new HashSet<String>();
        for (int k = 0; k < raw.size(); k++) {
            var i = raw.get(k);
            String name = i.path() != null && !i.path().isEmpty() && !duplicate.contains(i.path()) ? i.path() : rowName + "#" + k;
            while (!used.add(name)) name = name + "'";
            out.add(new Image(name, i.bytes(), i.path()));
        }
        return out;
    }

    /** The row's videos: the video column's structs or paths, named as images are ({@code row17#v0} without a usable path). */
    private List<Video> videos(Group row, String sampleId, String rowName) {
        if (videosColumn == null) return List.of();
        int c = row.getType().getFieldIndex(videosColumn);
        if (row.getFieldRepetitionCount(c) == 0) return List.of();
        var out = new ArrayList<Video>();
        for (var v : named(row, c, videosColumn, sampleId, rowName + "#v")) out.add(new Video(v.name(), v.bytes(), v.path()));
        return out;
    }

    /**
     * The structs or paths of column {@code column} (field {@code c}) in {@code row}, one or a list, each named by its path
     * where that path is unique in the row, else {@code fallback + k} (a name used twice gets a prime).
     */
    private List<Image> named(Group row, int c, String column, String sampleId, String fallback) {
        Type t = row.getType().getType(c);
        var raw = new ArrayList<Image>();
        if (isList(t)) {
            var elements = elements(row.getGroup(c, 0));
            for (int k = 0; k < elements.size(); k++) raw.add(image(elements.get(k), sampleId, column + "[" + k + "]"));
        } else {
            raw.add(image(new Slot(row, c, 0), sampleId, column));
        }
        var paths = new HashSet<String>();
        var duplicate = new HashSet<String>();
        for (var m : raw) if (m.path() != null && !paths.add(m.path())) duplicate.add(m.path());
        var out = new ArrayList<Image>(raw.size());
        var used = new HashSet<String>();
        for (int k = 0; k < raw.size(); k++) {
            var m = raw.get(k);
            String name = m.path() != null && !duplicate.contains(m.path()) ? m.path() : fallback + k;
            while (!used.add(name)) name = name + "'";
            out.add(new Image(name, m.bytes(), m.path()));
        }
        return out;
    }

    /**
     * The row's audio clips: the audio column's structs or paths, named as videos are ({@code row17#a0} without a usable
     * path); none when the column holds nothing in this row.
     */
    private List<Image> audios(Group row, String sampleId, String rowName) {
        if (audiosColumn == null) return List.of();
        int c = row.getType().getFieldIndex(audiosColumn);
        if (row.getFieldRepetitionCount(c) == 0 || !holds(row, c, 0)) return List.of();
        return named(row, c, audiosColumn, sampleId, rowName + "#a");
    }

    /**
     * Names the items of {@code type} ({@code {"type": type}}, or an untyped item with one of {@code markers}) that name
     * nothing (none of {@code nameKeys}) with {@code paths} in order: the k-th such item, named or not, takes the k-th
     * path. False when the record has no such items (its media then go in a list).
     */
    private static boolean fillBareItems(ObjectNode record, String type, List<String> markers, List<String> nameKeys, List<String> paths) {
        var list = record.get("messages");
        if (list == null || !list.isArray()) return false;
        boolean typed = false;
        int k = 0;
        for (var m : list) {
            var content = m.get("content");
            if (content == null || !content.isArray()) continue;
            for (var item : content) {
                if (!(item instanceof ObjectNode o)) continue;
                boolean ofType = type.equals(o.path("type").asText(null));
                for (String marker : markers) ofType |= o.has(marker);
                if (!ofType) continue;
                typed = true;
                boolean named = false;
                for (String key : nameKeys) named |= o.hasNonNull(key);
                if (!named && k < paths.size()) o.put(type, paths.get(k));
                k++;
            }
        }
        return typed;
    }

    /** A value of a group: field {@code field}, repetition {@code index}; absent (null) when {@code group} is null. */
    private record Slot(Group group, int field, int index) {
        boolean present() { return group != null && group.getFieldRepetitionCount(field) > index; }

        Type type() { return group.getType().getType(field); }
    }

    private static Image image(Slot s, String sampleId, String where) {
        if (!s.present()) throw fail(sampleId, where + " is null; expected struct<bytes, path> or a path");
        Type t = s.type();
        if (t.isPrimitive()) {
            if (!isString(t)) throw fail(sampleId, where + " is " + t + "; expected struct<bytes, path> or a string path");
            return new Image(null, null, s.group().getString(s.field(), s.index()));
        }
        Group g = s.group().getGroup(s.field(), s.index());
        var gt = g.getType();
        byte[] bytes = null;
        String path = null;
        if (gt.containsField("bytes") && g.getFieldRepetitionCount("bytes") > 0) bytes = g.getBinary("bytes", 0).getBytes();
        if (gt.containsField("path") && g.getFieldRepetitionCount("path") > 0) path = g.getString("path", 0);
        if (bytes != null && bytes.length == 0) bytes = null;
        if (path != null && path.isEmpty()) path = null;
        if (bytes == null && path == null) throw fail(sampleId, where + " has neither bytes nor a path");
        return new Image(null, bytes, path);
    }

    /**
     * Whether value {@code index} of field {@code field} holds anything: a non-empty string or binary, any other
     * primitive, a list with an element that holds something, a struct with a field that does. HF's null audio
     * ({@code {bytes: null, path: null}}), an empty list or an empty string hold nothing. Reads no bytes into a copy.
     */
    private static boolean holds(Group g, int field, int index) {
        Type t = g.getType().getType(field);
        if (t.isPrimitive()) {
            var name = t.asPrimitiveType().getPrimitiveTypeName();
            return !(name == PrimitiveType.PrimitiveTypeName.BINARY || name == PrimitiveType.PrimitiveTypeName.FIXED_LEN_BYTE_ARRAY)
                    || g.getBinary(field, index).length() > 0;
        }
        Group v = g.getGroup(field, index);
        if (isList(t)) {
            for (var s : elements(v)) if (s.present() && holds(s.group(), s.field(), s.index())) return true;
            return false;
        }
        for (int i = 0; i < v.getType().getFieldCount(); i++)
            for (int k = 0; k < v.getFieldRepetitionCount(i); k++) if (holds(v, i, k)) return true;
        return false;
    }

    // --- Parquet values as JSON ---

    private static boolean isList(Type t) {
        return !t.isPrimitive() && t.getLogicalTypeAnnotation() instanceof LogicalTypeAnnotation.ListLogicalTypeAnnotation;
    }

    private static boolean isString(Type t) {
        var a = t.getLogicalTypeAnnotation();
        return t.isPrimitive() && (a instanceof LogicalTypeAnnotation.StringLogicalTypeAnnotation
                || a instanceof LogicalTypeAnnotation.EnumLogicalTypeAnnotation || a instanceof LogicalTypeAnnotation.JsonLogicalTypeAnnotation);
    }

    /**
     * The elements of a LIST group: the standard three levels ({@code repeated group list { element }}) or the
     * older two ({@code repeated <element>}, or a repeated group named {@code array} or {@code *_tuple}, or one
     * with several fields, being the element itself), per the Parquet spec's backward-compatibility rules.
     */
    private static List<Slot> elements(Group list) {
        Type rep = list.getType().getType(0);
        int n = list.getFieldRepetitionCount(0);
        var out = new ArrayList<Slot>(n);
        boolean threeLevel = !rep.isPrimitive() && rep.asGroupType().getFieldCount() == 1
                && !rep.getName().equals("array") && !rep.getName().endsWith("_tuple");
        for (int k = 0; k < n; k++) {
            if (threeLevel) {
                Group wrapper = list.getGroup(0, k);
                out.add(new Slot(wrapper, 0, 0));
            } else {
                out.add(new Slot(list, 0, k));
            }
        }
        return out;
    }

    /** Field {@code field}'s value {@code index} of {@code g} as JSON (null fields of structs are left out). */
    static JsonNode value(Group g, int field, int index) {
        Type t = g.getType().getType(field);
        if (t.isPrimitive()) return primitive(g, field, index, t.asPrimitiveType());
        Group v = g.getGroup(field, index);
        if (isList(t)) {
            ArrayNode a = NODES.arrayNode();
            for (var s : elements(v)) a.add(s.present() ? value(s.group(), s.field(), s.index()) : NODES.nullNode());
            return a;
        }
        ObjectNode o = NODES.objectNode();
        var gt = v.getType();
        for (int i = 0; i < gt.getFieldCount(); i++) {
            int n = v.getFieldRepetitionCount(i);
            if (n == 0) continue; // null: left out
            Type ft = gt.getType(i);
            if (ft.isRepetition(Type.Repetition.REPEATED)) {
                ArrayNode a = o.putArray(ft.getName());
                for (int k = 0; k < n; k++) a.add(value(v, i, k));
            } else {
                o.set(ft.getName(), value(v, i, 0));
            }
        }
        return o;
    }

    private static JsonNode primitive(Group g, int field, int index, PrimitiveType t) {
        return switch (t.getPrimitiveTypeName()) {
            case BINARY, FIXED_LEN_BYTE_ARRAY -> isString(t) ? NODES.textNode(g.getString(field, index))
                    : NODES.binaryNode(g.getBinary(field, index).getBytes());
            case INT32 -> NODES.numberNode(g.getInteger(field, index));
            case INT64 -> NODES.numberNode(g.getLong(field, index));
            case BOOLEAN -> NODES.booleanNode(g.getBoolean(field, index));
            case FLOAT -> NODES.numberNode(g.getFloat(field, index));
            case DOUBLE -> NODES.numberNode(g.getDouble(field, index));
            case INT96 -> NODES.binaryNode(g.getInt96(field, index).getBytes());
        };
    }

    private static SampleException fail(String sampleId, String message) {
        return new SampleException(sampleId, SampleException.Stage.MANIFEST, message);
    }
}
