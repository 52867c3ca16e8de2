//! What a prompt may be: ACP content blocks, read with the schema's own type, within a size.

use agent_client_protocol_schema::v1::ContentBlock;
use serde_json::Value;

use super::SessionError;

/// The largest prompt, as JSON.
pub const MAX_PROMPT_BYTES: usize = 1024 * 1024;
/// Most blocks in one prompt.
const MAX_BLOCKS: usize = 1024;

/// The prompt's blocks as the harness will get them, or why it is refused.
pub fn check(prompt: &[Value]) -> Result<Vec<ContentBlock>, SessionError> {
    let size = serde_json::to_vec(prompt)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size > MAX_PROMPT_BYTES {
        return Err(SessionError::PromptTooLarge {
            size,
            max: MAX_PROMPT_BYTES,
        });
    }
    if prompt.is_empty() || prompt.len() > MAX_BLOCKS {
        return Err(SessionError::Invalid {
            field: "prompt",
            why: format!("a prompt is 1 to {MAX_BLOCKS} content blocks"),
        });
    }
    prompt
        .iter()
        .enumerate()
        .map(|(i, block)| {
            serde_json::from_value::<ContentBlock>(block.clone()).map_err(|e| {
                SessionError::Invalid {
                    field: "prompt",
                    why: format!("prompt[{i}] is not an ACP content block: {e}"),
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blocks_are_read_as_acp_content() {
        assert!(check(&[json!({"type": "text", "text": "hi"})]).is_ok());
        let e = check(&[json!({"type": "text"})]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("prompt[0] is not an ACP content block"),
            "{e}"
        );
        assert!(check(&[]).is_err());
        let big = json!({"type": "text", "text": "x".repeat(MAX_PROMPT_BYTES)});
        assert!(matches!(
            check(&[big]),
            Err(SessionError::PromptTooLarge { .. })
        ));
    }
}
