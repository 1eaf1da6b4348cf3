name(ctxrelay).
version('0.1.0').
title('Context runtime for LLM agents: durable transcripts, bounded CLP(FD)-packed context').
keywords([llm, agents, context, clpfd, janus]).
author('ctxrelay contributors', '').
% Placeholder: the project has no public repository yet; replace on publication.
home('https://github.com/ctxrelay/ctxrelay').
% SWI-Prolog >= 9.1.12 bundles janus.  The Python package ctxrelay (and its
% dependencies) is installed with pip, not as a pack: see docs/prolog_pack.md.
requires(prolog >= '9.1.12').
requires(prolog:library(janus)).
requires(prolog:library(clpfd)).
