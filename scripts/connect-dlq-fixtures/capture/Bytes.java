package capture;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;

/** The byte notation of records.json and of the captured fixtures. */
final class Bytes {
    private Bytes() {
    }

    /** A JSON string is UTF-8 text, {"hex"} raw bytes, {"repeat","times"} and {"concat"} build longer ones; null is null. */
    static byte[] decode(JsonNode spec) {
        if (spec == null || spec.isNull()) {
            return null;
        }
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        append(spec, out);
        return out.toByteArray();
    }

    private static void append(JsonNode spec, ByteArrayOutputStream out) {
        if (spec.isTextual()) {
            out.writeBytes(spec.textValue().getBytes(StandardCharsets.UTF_8));
        } else if (spec.has("hex")) {
            out.writeBytes(HexFormat.of().parseHex(spec.get("hex").textValue()));
        } else if (spec.has("repeat")) {
            for (int i = 0; i < spec.get("times").intValue(); i++) {
                append(spec.get("repeat"), out);
            }
        } else if (spec.has("concat")) {
            for (JsonNode part : spec.get("concat")) {
                append(part, out);
            }
        } else {
            throw new IllegalArgumentException("not a byte notation: " + spec);
        }
    }

    /** Text when the bytes are valid UTF-8, {"hex"} otherwise, null for null. */
    static JsonNode encode(byte[] bytes) {
        if (bytes == null) {
            return JsonNodeFactory.instance.nullNode();
        }
        try {
            String text = StandardCharsets.UTF_8.newDecoder()
                .onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT)
                .decode(ByteBuffer.wrap(bytes))
                .toString();
            return JsonNodeFactory.instance.textNode(text);
        } catch (CharacterCodingException e) {
            ObjectNode hex = JsonNodeFactory.instance.objectNode();
            hex.put("hex", HexFormat.of().formatHex(bytes));
            return hex;
        }
    }
}
