:- module(ctxrelay_shape,
          [ shape_plan/2,           % +Roles, -Plan
            assistant_frame/1       % -Text (extension point)
          ]).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(error)).

/** <module> Request shape: what strict chat templates accept

With the policy option alternation(strict), a rendered pack is brought into
the shape every strict chat template accepts (Llama, Mistral and others
served by vLLM, TGI or llama.cpp): one leading system message, then user
and assistant messages strictly alternating, starting and ending with the
user.

  - every system message (instructions, the boundary) joins the first one;
  - consecutive messages of one side merge into one message, their texts
    joined by a blank line (a user side: the user's turns and reference
    material; an assistant side: the assistant's turns, tool calls and tool
    results, which are written out as text);
  - an assistant side that would come first is framed as the user's
    reference text (assistant_frame/1) and merges with the user side after it.

shape_plan/2 decides; ctxrelay.retrieval.shape joins the texts and counts
the result exactly, and the ledger charges the difference.
*/

:- multifile assistant_frame/1.
:- dynamic assistant_frame/1.

%!  assistant_frame(-Text) is det.
%
%   The words that introduce an assistant message that cannot stay one
%   because it would open the conversation.
assistant_frame("[Earlier in this conversation, the assistant wrote:]\n").

%!  shape_plan(+Roles:list, -Plan:list(dict)) is det.
%
%   Roles are the rendered messages' roles in order (system, user,
%   assistant, assistant_call for an assistant message with tool calls,
%   tool).  Plan lists the output messages: plan{role, from, framed,
%   frame, text} with from the 0-based indexes it joins, framed the first
%   of them that Frame introduces (an assistant side written as the user's
%   text; [] and "" for none) and text true when tool calls or results
%   must be written out.
%
%   @error domain_error(request_shape, Roles) when the last message is not
%          the user's (a managed turn always ends with it)
shape_plan(Roles, Plan) :-
    must_be(list, Roles),
    numbered(Roles, 0, Numbered),
    partition([_-R]>>(R == system), Numbered, System, Rest),
    runs(Rest, Runs0),
    frame_leading(Runs0, Runs1),
    merge_adjacent(Runs1, Runs),
    (   last(Runs, run(user, _, _, _)) -> true ; domain_error(request_shape, Roles) ),
    (   System == []
    ->  Head = []
    ;   pairs_keys_of(System, SysIdx),
        Head = [plan{role:system, from:SysIdx, framed:[], frame:"", text:false}]
    ),
    maplist(run_step, Runs, Steps),
    append(Head, Steps, Plan).

numbered([], _, []).
numbered([R|Rs], I, [I-R|T]) :- I1 is I + 1, numbered(Rs, I1, T).

pairs_keys_of(Pairs, Keys) :- findall(K, member(K-_, Pairs), Keys).

side(user, user).
side(assistant, assistant).
side(assistant_call, assistant).
side(tool, assistant).

%   run(Side, Indexes, Framed-Frame, Text): consecutive messages of one side.
runs([], []).
runs([I-R|T], [run(Side, [I|Is], []-"", Text)|Runs]) :-
    side(R, Side),
    take_side(T, Side, More, Rest),
    pairs_keys_of(More, Is),
    (   memberchk(R, [assistant_call, tool]) -> Text = true
    ;   member(_-R2, More), memberchk(R2, [assistant_call, tool]) -> Text = true
    ;   Text = false
    ),
    runs(Rest, Runs).

take_side([I-R|T], Side, [I-R|More], Rest) :-
    side(R, Side),
    !,
    take_side(T, Side, More, Rest).
take_side(Rest, _, [], Rest).

frame_leading([run(assistant, Is, _, _)|Runs], [run(user, Is, Is-Frame, true)|Runs]) :-
    !,
    assistant_frame(Frame).
frame_leading(Runs, Runs).

%   A framed assistant side becomes the user's; it joins the user side after it.
merge_adjacent([run(user, Is1, F, T1), run(user, Is2, []-"", T2)|Runs], Merged) :-
    !,
    append(Is1, Is2, Is),
    (   T1 == true -> T = true ; T = T2 ),
    merge_adjacent([run(user, Is, F, T)|Runs], Merged).
merge_adjacent([R|Runs], [R|Merged]) :-
    !,
    merge_adjacent(Runs, Merged).
merge_adjacent([], []).

run_step(run(Side, Is, Framed-Frame, Text),
         plan{role:Side, from:Is, framed:Framed, frame:Frame, text:Text}).
