// The .model language. docs/language.md describes it; this file is the syntax.
// Newlines are ordinary white space: every statement starts with a keyword or with
// `name (, name)* =`, so statements need no separator (a ';' is allowed).
grammar Model;

file        : topItem* EOF ;
topItem     : importDecl | letStmt | defDecl | modelDecl | trainDecl | ';' ;

importDecl  : 'import' STRING ;
defDecl     : decorator* 'def' IDENT '(' argList? ')' block ;
decorator   : CHECKPOINT ;
argList     : arg (',' arg)* ','? ;
arg         : IDENT ':' typeExpr ('=' expr)?          # typedArg
            | IDENT ('=' expr)?                       # untypedArg
            ;
typeExpr    : IDENT ('[' dimList? ']')? ;
dimList     : dimItem (',' dimItem)* ;
dimItem     : '...'                                    # ellipsisDim
            | expr                                     # exprDim
            ;

modelDecl   : 'model' IDENT ('(' dimParams? ')')? block ;
dimParams   : dimParam (',' dimParam)* ','? ;
dimParam    : IDENT ('=' expr)? ;

trainDecl   : 'train' IDENT '{' (trainEntry | ';')* '}' ;
trainEntry  : IDENT '=' expr ;

block       : '{' stmt* '}' ;
stmt        : 'let' IDENT '=' expr                                   # letStatement
            | 'param' IDENT ':' typeExpr ('=' expr)?                 # paramStmt
            | 'buffer' IDENT ':' typeExpr ('=' expr)?                # bufferStmt
            | 'input' IDENT ':' typeExpr                             # inputStmt
            | 'output' IDENT (',' IDENT)*                            # outputStmt
            | 'return' expr (',' expr)*                              # returnStmt
            | 'for' IDENT 'in' expr '..' expr block                  # forStmt
            | ifChain                                                # ifStmt
            | IDENT (',' IDENT)* '=' expr                            # assignStmt
            | IDENT IDENT '=' expr                                   # wordStmt
            // A common slip, parsed so that its error can say what is wrong:
            | IDENT '(' callArgs? ')'                                # callStmt
            | ';'                                                    # emptyStmt
            ;
letStmt     : 'let' IDENT '=' expr ;
// A compile-time conditional: the condition is a constant (a bool argument, a comparison of
// known dims); only the branch taken is elaborated.
ifChain     : 'if' expr block ('else' (ifChain | block))? ;

expr        : <assoc=right> expr '**' expr                           # powExpr
            | ('-' | '+') expr                                       # unaryExpr
            | expr ('*' | '/' | '@') expr                            # mulExpr
            | expr ('+' | '-') expr                                  # addExpr
            | expr ('<' | '<=' | '>' | '>=' | '==' | '!=') expr      # cmpExpr
            | primary                                                # primaryExpr
            ;
primary     : CHECKPOINT? IDENT '(' callArgs? ')'                    # callExpr
            | IDENT                                                  # nameExpr
            | INT                                                    # intExpr
            | FLOAT                                                  # floatExpr
            | STRING                                                 # stringExpr
            | ('true' | 'false')                                     # boolExpr
            | '(' expr ')'                                           # parenExpr
            | '[' (expr (',' expr)* ','?)? ']'                       # listExpr
            ;
callArgs    : callArg (',' callArg)* ','? ;
callArg     : IDENT '=' expr                                         # keywordArg
            | expr                                                   # positionalArg
            ;

CHECKPOINT  : '@checkpoint' ;
INT         : [0-9]+ ;
FLOAT       : [0-9]+ '.' [0-9]+ EXPONENT? | [0-9]+ EXPONENT | '.' [0-9]+ EXPONENT? ;
// A number run into letters (0x10, 12abc, 1e): one token, so that it is reported as such.
BAD_NUMBER  : [0-9]+ ('.' [0-9]+)? [a-zA-Z_] [a-zA-Z_0-9]* ;
fragment EXPONENT : [eE] [+-]? [0-9]+ ;
IDENT       : [a-zA-Z_] [a-zA-Z_0-9]* ;
STRING      : '"' (~["\\\r\n] | '\\' ~[\r\n])* '"' ;
UNTERMINATED_STRING : '"' (~["\\\r\n] | '\\' ~[\r\n])* ;
COMMENT     : '#' ~[\r\n]* -> skip ;
WS          : [ \t\r\n]+ -> skip ;
ERRCHAR     : . ;
