package dev.stoker.text;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.stoker.core.SampleException;
import dev.stoker.core.UnservedMedia;
import dev.stoker.text.Message.Role;
import dev.stoker.text.Message.Text;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * A record carrying a medium Stoker does not serve ({@link UnservedMedia}) is refused at stage MANIFEST, naming where
 * the medium was found and that it is not supported, by every way a trainer would read it: the same cases for each
 * row of the table, so that a medium served later is one row removed. Before, an audio record (LLaMA-Factory's
 * {@code mllm_audio_demo.json}) was accepted as a text-only sample with {@code <audio>} tokenized as text.
 */
@Timeout(60)
class MediaRefusalTest {
    private final SampleParser parser = new SampleParser();

    private ChatSample parse(String json) {
        return parser.parseLine(json.getBytes(StandardCharsets.UTF_8), "demo.json[0]");
    }

    private String refusal(String json) {
        var e = assertThrows(SampleException.class, () -> parse(json), json);
        assertEquals(SampleException.Stage.MANIFEST, e.stage());
        assertEquals(SampleException.Kind.ERROR, e.kind(), "an error, not a filter");
        assertEquals("demo.json[0]", e.sampleId());
        return e.getMessage();
    }

    /** The records of LLaMA-Factory's audio demos (data/mllm_audio_demo.json, mllm_video_audio_demo.json), and ShareGPT's. */
    @Test
    void llamaFactoryAudioRecordsAreRefused() {
        assertEquals("messages[0].content: <audio> placeholder found; audio is not supported by the Qwen-VL processors", refusal("""
            {"messages": [{"content": "<audio>What's that sound?", "role": "user"},
                          {"content": "It is the sound of glass shattering.", "role": "assistant"}],
             "audios": ["mllm_demo_data/1.mp3"]}"""));
        assertEquals("conversations[0].value: <audio> placeholder found; audio is not supported by the Qwen-VL processors", refusal("""
            {"conversations": [{"from": "human", "value": "<audio>What's that sound?"}, {"from": "gpt", "value": "Glass."}],
             "audios": ["1.mp3"]}"""));
        assertEquals("messages[0].content: <audio> placeholder found; audio is not supported by the Qwen-VL processors", refusal("""
            {"messages": [{"content": "<video><audio>What is the video describing?", "role": "user"},
                          {"content": "A girl who is drawing a picture of a guitar and feel nervous.", "role": "assistant"}],
             "videos": ["4.mp4"], "audios": ["4.mp3"]}"""));
        assertEquals("field 'audios': audio is not supported by the Qwen-VL processors", refusal("""
            {"conversations": [{"from": "human", "value": "Transcribe it."}, {"from": "gpt", "value": "<audio> hello"}],
             "audios": ["1.wav"]}"""));
    }

    /**
     * A parser given the reason its job takes no video (a trainer's release without known video rules) says it after
     * "not supported", wherever it refuses video; audio's refusal stays as it is; a parser that reads video has no reason.
     */
    @Test
    void aVideoRefusalSaysTheJobsReason() {
        var refusing = new SampleParser(SampleParser.Videos.REFUSE, "pass --transformers 4.57 or 5.18");
        java.util.function.Function<String, String> refusal = json -> assertThrows(SampleException.class,
                () -> refusing.parseLine(json.getBytes(StandardCharsets.UTF_8), "s")).getMessage();
        assertEquals("messages[0].content: <video> placeholder found; video is not supported: pass --transformers 4.57 or 5.18",
                refusal.apply("""
                    {"messages": [{"role": "user", "content": "<video>Why?"}, {"role": "assistant", "content": "So."}], "videos": ["a.mp4"]}"""));
        assertEquals("field 'videos': video is not supported: pass --transformers 4.57 or 5.18", refusal.apply("""
            {"messages": [{"role": "user", "content": "Why?"}, {"role": "assistant", "content": "So."}], "videos": ["a.mp4"]}"""));
        assertEquals("messages[0].content[0]: video content is not supported: pass --transformers 4.57 or 5.18", refusal.apply("""
            {"messages": [{"role": "user", "content": [{"type": "video", "video": "a.mp4"}]}, {"role": "assistant", "content": "So."}]}"""));
        assertEquals("field 'audios': audio is not supported by the Qwen-VL processors", refusal.apply("""
            {"messages": [{"role": "user", "content": "Why?"}, {"role": "assistant", "content": "So."}], "audios": ["a.mp3"]}"""));
        assertThrows(IllegalArgumentException.class, () -> new SampleParser(SampleParser.Videos.ACCEPT, "no"));
    }

    @ParameterizedTest
    @EnumSource(UnservedMedia.class)
    void aPlaceholderIsRefusedWhereverImagePlaceholdersAreRead(UnservedMedia media) {
        String p = media.placeholder();
        var cases = Map.of(
                "conversations[0].value", "{\"conversations\": [{\"from\": \"human\", \"value\": \"P what?\"}, {\"from\": \"gpt\", \"value\": \"x\"}]}",
                "conversations[1].value", "{\"images\": [], \"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}, {\"from\": \"gpt\", \"value\": \" P\"}]}",
                "messages[0].content", "{\"messages\": [{\"role\": \"user\", \"content\": \"P what?\"}]}",
                "messages[1].content", "{\"images\": [\"a.jpg\"], \"messages\": [{\"role\": \"user\", \"content\": \"<image>hi\"}, "
                        + "{\"role\": \"assistant\", \"content\": \"<image>P\"}]}",
                "messages[2].content", "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi\"}]}, "
                        + "{\"role\": \"assistant\", \"content\": \"ok\"}, {\"role\": \"user\", \"content\": \"and P?\"}]}");
        cases.forEach((path, json) -> assertEquals(path + ": " + p + " placeholder found; " + media.notSupported(),
                refusal(json.replace("P", p)), json));
    }

    @ParameterizedTest
    @EnumSource(UnservedMedia.class)
    void aNonEmptyTopLevelFieldIsRefusedAndAnEmptyOneIsNot(UnservedMedia media) {
        for (String field : media.fields()) {
            for (String value : List.of("[\"x\"]", "\"x\"", "[{\"path\": \"x\"}]"))
                assertEquals("field '" + field + "': " + media.notSupported(),
                        refusal("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"" + field + "\": " + value + "}"));
            for (String empty : List.of("[]", "\"\"", "null"))
                assertEquals(List.of(Message.text(Role.USER, "hi")),
                        parse("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"" + field + "\": " + empty + "}").messages());
        }
    }

    @ParameterizedTest
    @EnumSource(UnservedMedia.class)
    void aTypedItemOfTheMediumIsRefusedNamingIt(UnservedMedia media) {
        for (String name : media.itemTypes()) {
            for (String item : List.of("{\"type\": \"" + name + "\", \"" + name + "\": \"x\"}", "{\"type\": \"" + name + "\"}", "{\"" + name + "\": \"x\"}"))
                assertEquals("messages[0].content[1]: " + media.contentNotSupported(), refusal(
                        "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi\"}, " + item + "]}]}"), item);
        }
    }

    /** As {@code <image>} in a typed text item is literal text (the HF template renders it so), so are the others. */
    @ParameterizedTest
    @EnumSource(UnservedMedia.class)
    void insideATypedTextItemThePlaceholderIsLiteralTextAsImageIs(UnservedMedia media) {
        var s = parse("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"" + media.placeholder()
                + " and <image>\"}]}, {\"role\": \"assistant\", \"content\": [{\"type\": \"text\", \"text\": \"ok\"}]}]}");
        assertEquals(List.of(new Text(media.placeholder() + " and <image>")), s.messages().get(0).parts());
        assertEquals(List.of(), s.imagePaths());
    }

    /** The LLaVA rule reads placeholders in human turns only: elsewhere each stays literal text, as {@code <image>} does. */
    @ParameterizedTest
    @EnumSource(UnservedMedia.class)
    void llavaAssistantTurnsStayVerbatimAsForImage(UnservedMedia media) {
        var s = parse("{\"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}, {\"from\": \"gpt\", \"value\": \""
                + media.placeholder() + " <image>\"}]}");
        assertEquals(Message.text(Role.ASSISTANT, media.placeholder() + " <image>"), s.messages().get(1));
    }
}
