//! Graph algorithms the checkers share.

/// Tarjan's strongly connected components of the graph whose node `v` has the out-edges
/// `out[v]`, each leading to `target(edge)` (`None`: the edge is left out), found
/// iteratively (histories make deep graphs), in reverse topological order: a component
/// comes before every component that reaches it. With `reverse`, the search starts from
/// the last node and follows each node's last edge first, which yields another
/// topological order of the same components.
pub(crate) fn strongly_connected<E>(
    out: &[Vec<E>],
    target: impl Fn(&E) -> Option<usize>,
    reverse: bool,
) -> Vec<Vec<usize>> {
    let n = out.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut found = Vec::new();
    let mut next = 0;
    for root in (0..n).map(|r| if reverse { n - 1 - r } else { r }) {
        if index[root] != usize::MAX {
            continue;
        }
        // Each frame: a node and how many of its edges were looked at.
        let mut frames = vec![(root, 0usize)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(frame) = frames.last_mut() {
            let v = frame.0;
            let edges = &out[v];
            let next_edge = if reverse {
                edges.len().checked_sub(frame.1 + 1).map(|i| &edges[i])
            } else {
                edges.get(frame.1)
            };
            if let Some(edge) = next_edge {
                frame.1 += 1;
                let Some(w) = target(edge) else {
                    continue;
                };
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    frames.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            frames.pop();
            if let Some(&(parent, _)) = frames.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                found.push(component);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_come_in_reverse_topological_order() {
        // 0 -> 1 <-> 2 -> 3, and 4 alone; the edge 3 -> 0 is left out.
        let out: Vec<Vec<(usize, bool)>> = vec![
            vec![(1, true)],
            vec![(2, true)],
            vec![(1, true), (3, true)],
            vec![(0, false)],
            vec![],
        ];
        let allowed = |&(to, ok): &(usize, bool)| ok.then_some(to);
        let mut forward = strongly_connected(&out, allowed, false);
        for c in &mut forward {
            c.sort_unstable();
        }
        assert_eq!(forward, vec![vec![3], vec![1, 2], vec![0], vec![4]]);
        let mut backward = strongly_connected(&out, allowed, true);
        for c in &mut backward {
            c.sort_unstable();
        }
        assert_eq!(backward.len(), 4);
        assert!(backward.contains(&vec![1, 2]));
        // With the left-out edge, 0..=3 is one component.
        let mut all = strongly_connected(&out, |&(to, _)| Some(to), false);
        all[0].sort_unstable();
        assert_eq!(all, vec![vec![0, 1, 2, 3], vec![4]]);
    }
}
