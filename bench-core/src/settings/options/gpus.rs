//! `--gpus`: the device indices this process drives, or, with `--explain-thresholds
//! --gpu-model NAME`, the GPU count to explain for (no GPU is asked then).

use crate::model::bounds::MAX_GPUS;

/// What `--gpus` and `--gpu-model` say.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuSelection {
    /// The devices this process drives (`--gpus 0,1`).
    pub devices: Option<Vec<usize>>,
    /// `--gpu-model NAME --gpus N` (N defaults to 8): explain for this model and count.
    pub model: Option<(String, u32)>,
}

/// Validates `--gpus` (and `--gpu-model`, which needs `--explain-thresholds`).
pub fn parse_gpu_list(
    gpus: Option<&str>,
    model: Option<&str>,
    explain: bool,
) -> Result<GpuSelection, String> {
    if let Some(model) = model {
        if !explain {
            return Err("--gpu-model is for --explain-thresholds".into());
        }
        if model.trim().is_empty() || model.len() > 128 {
            return Err("--gpu-model needs a GPU model name (e.g. H200)".into());
        }
        let count = match gpus.map(|n| n.trim().parse::<u32>()) {
            None => 8,
            Some(Ok(c)) if (1..=MAX_GPUS).contains(&c) => c,
            Some(_) => {
                return Err(format!(
                    "with --gpu-model, --gpus is the GPU count (1..={MAX_GPUS}), not '{}'",
                    gpus.unwrap_or_default()
                ))
            }
        };
        return Ok(GpuSelection {
            devices: None,
            model: Some((model.trim().to_string(), count)),
        });
    }
    let Some(list) = gpus else {
        return Ok(GpuSelection::default());
    };
    let devices = list
        .split(',')
        .map(|g| {
            g.trim()
                .parse::<usize>()
                .map_err(|_| format!("invalid GPU index '{g}' in --gpus '{list}'"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Never empty: splitting yields one item at least, and an empty one is no index.
    let distinct: std::collections::BTreeSet<_> = devices.iter().collect();
    if distinct.len() != devices.len() {
        return Err(format!("--gpus lists a GPU twice: {devices:?}"));
    }
    Ok(GpuSelection {
        devices: Some(devices),
        model: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_is_a_device_list_or_with_a_model_a_count() {
        assert_eq!(
            parse_gpu_list(Some("0,1"), None, false).unwrap().devices,
            Some(vec![0, 1])
        );
        assert_eq!(
            parse_gpu_list(None, None, true).unwrap(),
            GpuSelection::default()
        );
        let m = parse_gpu_list(Some("2"), Some("H200"), true).unwrap();
        assert_eq!((m.devices, m.model), (None, Some(("H200".into(), 2))));
        assert_eq!(
            parse_gpu_list(None, Some("H100"), true).unwrap().model,
            Some(("H100".into(), 8))
        );
        for (gpus, model, explain, err) in [
            (Some("0,0"), None, false, "lists a GPU twice"),
            (Some("x"), None, false, "invalid GPU index"),
            (None, Some("H200"), false, "is for --explain-thresholds"),
            (Some("0,1"), Some("H200"), true, "is the GPU count"),
            (Some("0"), Some("H200"), true, "is the GPU count"),
            (None, Some(" "), true, "needs a GPU model name"),
        ] {
            let e = parse_gpu_list(gpus, model, explain).unwrap_err();
            assert!(e.contains(err), "{e}");
        }
    }
}
