package dev.stoker.text;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.SampleException;
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
 * Turns one dataset record (a JSON object, or one raw JSONL line) into a {@link ChatSample},
 * accepting the two formats Qwen-VL SFT data comes in.
 *
 * <p><b>LLaVA / qwen-vl-finetune</b>: {@code {"id"?, "image"?: str | [str], "conversations": [{"from", "value"}]}}.
 * Converted as the official {@code _build_messages} does (spec §10): {@code from == "human"} becomes
 * {@code user}; user values are split on {@code <image>}, text segments are {@code strip()}ped and empty
 * ones dropped; every other {@code from} becomes {@code assistant} with its value kept verbatim (an
 * {@code <image>} there stays literal text, as upstream). Two deliberate extensions: {@code "system"}
 * becomes a system turn (upstream would make it an assistant turn and train on it) and {@code "user"}
 * is accepted as {@code "human"}. {@code "images"} is accepted as an alias of {@code "image"}.
 * The number of {@code <image>} placeholders must equal the number of images.
 *
 * <p><b>HF messages</b>: {@code {"id"?, "messages": [{"role", "content": str | [item]}]}} with items
 * {@code {"type":"text","text"}} or images ({@code type == "image"} or a key {@code image} /
 * {@code image_url}; the reference is {@code image}, {@code image_url} (string or {@code {"url"}}),
 * {@code url} or {@code path}). Roles are {@code system}, {@code user}, {@code assistant}.
 *
 * <p>Video ({@code <video>}, {@code type == "video"}) is rejected, as is anything mistyped; every error
 * is a {@link SampleException} at stage {@code MANIFEST} naming the sample and the JSON path of the field.
 * The sample id is the record's {@code "id"} (string or number) when present, else the caller's.
 *
 * <p>Threading: instances are immutable and may be shared; {@link #parseLine} allocates its decoder per call.
 */
public final class SampleParser {
    private static final String IMAGE_TOKEN = "<image>";
    private static final String VIDEO_TOKEN = "<video>";

    private final ObjectMapper json = new ObjectMapper()
            .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);

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

    /** Parses a record already read as JSON. */
    public ChatSample parse(JsonNode record, String fallbackId) {
        if (record == null || !record.isObject())
            throw error(fallbackId, "expected a JSON object, got " + kind(record));
        var id = sampleId(record, fallbackId);
        boolean llava = record.has("conversations");
        boolean hf = record.has("messages");
        if (llava && hf) throw error(id, "has both 'conversations' (LLaVA) and 'messages' (HF); expected one");
        if (!llava && !hf) throw error(id, "missing field 'conversations' (LLaVA format) or 'messages' (HF format)");
        return llava ? parseLlava(record, id) : parseMessages(record, id);
    }

    private static String sampleId(JsonNode record, String fallbackId) {
        var id = record.get("id");
        if (id == null || id.isNull()) return fallbackId;
        if (id.isTextual() || id.isIntegralNumber()) return id.asText();
        throw error(fallbackId, "field 'id': expected a string or integer, got " + kind(id));
    }

    private static ChatSample parseLlava(JsonNode record, String id) {
        var images = llavaImages(record, id);
        var turns = record.get("conversations");
        if (!turns.isArray()) throw error(id, "field 'conversations': expected an array, got " + kind(turns));
        if (turns.isEmpty()) throw error(id, "field 'conversations' is empty");
        var messages = new ArrayList<Message>(turns.size());
        int nextImage = 0;
        int placeholders = 0;
        for (int i = 0; i < turns.size(); i++) {
            var path = "conversations[" + i + "]";
            var turn = turns.get(i);
            if (!turn.isObject()) throw error(id, path + ": expected an object, got " + kind(turn));
            var from = requireText(turn, "from", path, id);
            var value = requireText(turn, "value", path, id);
            switch (from) {
                case "human", "user" -> {
                    var parts = new ArrayList<Message.Part>();
                    int pos = 0;
                    while (true) {
                        int img = value.indexOf(IMAGE_TOKEN, pos);
                        int vid = value.indexOf(VIDEO_TOKEN, pos);
                        if (vid >= 0 && (img < 0 || vid < img))
                            throw error(id, path + ".value: <video> placeholder found; video is not supported");
                        int end = img < 0 ? value.length() : img;
                        var seg = value.substring(pos, end).strip();
                        if (!seg.isEmpty()) parts.add(new Message.Text(seg));
                        if (img < 0) break;
                        placeholders++;
                        if (nextImage < images.size()) parts.add(new Message.Image(images.get(nextImage++)));
                        pos = img + IMAGE_TOKEN.length();
                    }
                    messages.add(new Message(Role.USER, parts));
                }
                case "system" -> messages.add(Message.text(Role.SYSTEM, value));
                default -> messages.add(Message.text(Role.ASSISTANT, value));
            }
        }
        if (placeholders != images.size())
            throw error(id, "the human turns have " + placeholders + " <image> placeholder(s) but the record lists "
                    + images.size() + " image(s)");
        return new ChatSample(id, messages, images);
    }

    private static List<String> llavaImages(JsonNode record, String id) {
        var key = "image";
        var node = record.get("image");
        var alias = record.get("images");
        if (node != null && !node.isNull() && alias != null && !alias.isNull())
            throw error(id, "has both 'image' and 'images'; expected one");
        if (node == null || node.isNull()) { node = alias; key = "images"; }
        if (node == null || node.isNull()) return List.of();
        if (node.isTextual()) return List.of(node.asText());
        if (!node.isArray()) throw error(id, "field '" + key + "': expected a string or an array of strings, got " + kind(node));
        var out = new ArrayList<String>(node.size());
        for (int i = 0; i < node.size(); i++) {
            var e = node.get(i);
            if (!e.isTextual()) throw error(id, "field '" + key + "[" + i + "]': expected a string, got " + kind(e));
            out.add(e.asText());
        }
        return out;
    }

    private static ChatSample parseMessages(JsonNode record, String id) {
        var list = record.get("messages");
        if (!list.isArray()) throw error(id, "field 'messages': expected an array, got " + kind(list));
        if (list.isEmpty()) throw error(id, "field 'messages' is empty");
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
                default -> throw error(id, path + ".role: unsupported role '" + roleName
                        + "'; expected system, user or assistant");
            };
            var content = m.get("content");
            if (content == null) throw error(id, path + ": missing field 'content'");
            if (content.isTextual()) {
                messages.add(Message.text(role, content.asText()));
            } else if (content.isArray()) {
                var parts = new ArrayList<Message.Part>(content.size());
                for (int j = 0; j < content.size(); j++) parts.add(contentItem(content.get(j), path + ".content[" + j + "]", id));
                messages.add(new Message(role, parts));
            } else {
                throw error(id, path + ".content: expected a string or an array, got " + kind(content));
            }
        }
        return ChatSample.of(id, messages);
    }

    private static Message.Part contentItem(JsonNode item, String path, String id) {
        if (!item.isObject()) throw error(id, path + ": expected an object, got " + kind(item));
        var typeNode = item.get("type");
        if (typeNode != null && !typeNode.isTextual()) throw error(id, path + ".type: expected a string, got " + kind(typeNode));
        var type = typeNode == null ? null : typeNode.asText();
        if ("video".equals(type) || item.has("video"))
            throw error(id, path + ": video content is not supported");
        if ("image".equals(type) || "image_url".equals(type) || item.has("image") || item.has("image_url"))
            return new Message.Image(imageRef(item, path, id));
        if ("text".equals(type) || (type == null && item.has("text")))
            return new Message.Text(requireText(item, "text", path, id));
        throw error(id, path + ": unsupported content item" + (type == null ? " without 'type'" : " of type '" + type + "'")
                + "; expected text or image");
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
